"""PyTorch's fused optimizer kernels (`torch._fused_adamw_`, `_fused_adam_`,
`_fused_sgd_`), the private API behind `torch.optim.AdamW(fused=True)` and its kin: one
pass over each tensor per update, where the `_foreach_` form makes a dozen. This is the
one module that calls them; `optimizer.FusedOptimizer` calls them once a job, with
that job's hyper-parameters, on views of its slices, and falls back to its own
`_foreach_` arithmetic where they are missing.

The kernels read the step count; they do not advance it (torch.optim advances it
first, as the caller must). They may change the gradients they are given.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["adam_step", "available", "sgd_step"]

_KERNELS = {"adam": "_fused_adam_", "adamw": "_fused_adamw_", "sgd": "_fused_sgd_"}
_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def available(algorithm: str, tensors: Sequence[torch.Tensor]) -> bool:
    """Whether this torch has `algorithm`'s fused kernel for `tensors` (dense, floating,
    on one CPU or CUDA device)."""
    if not hasattr(torch, _KERNELS[algorithm]) or not tensors:
        return False
    device = tensors[0].device
    return device.type in ("cpu", "cuda") and all(
        t.device == device and t.dtype in _DTYPES and t.layout == torch.strided for t in tensors
    )


def adam_step(
    algorithm: str,
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
) -> None:
    """One Adam or AdamW update of `params` in place, their step counts already advanced
    (`steps`: a 0-d float tensor each)."""
    kernel = torch._fused_adamw_ if algorithm == "adamw" else torch._fused_adam_
    kernel(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        amsgrad=False,
        maximize=False,
    )


def sgd_step(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    momentum_buffers: list[torch.Tensor],
    *,
    lr: float,
    momentum: float,
    dampening: float,
    weight_decay: float,
    nesterov: bool,
    first: bool,
) -> None:
    """One SGD update of `params` in place; with momentum, `momentum_buffers` start at
    the gradient on the `first` step (none: plain SGD)."""
    torch._fused_sgd_(
        params,
        grads,
        momentum_buffers if momentum != 0 else [],
        weight_decay=weight_decay,
        momentum=momentum,
        lr=lr,
        dampening=dampening,
        nesterov=nesterov,
        maximize=False,
        is_first_step=first,
    )
