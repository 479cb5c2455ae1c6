"""PyTorch's private fused optimizer kernels, as `optimize.torch_fused` calls them, against
the pinned torch's own optimizers: one job's update equals `torch.optim`'s."""

from __future__ import annotations

import pytest
import torch

from lightspeed.optimize.fusion import torch_fused


def tensors(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(5, 3, generator=g, dtype=torch.float64),
        torch.randn(3, generator=g, dtype=torch.float64),
    ]


@pytest.mark.parametrize("algorithm", ["adam", "adamw"])
def test_adam_kernels_step_as_torch_optim_does(algorithm: str) -> None:
    params = tensors(0)
    reference = [torch.nn.Parameter(p.clone()) for p in params]
    kind = torch.optim.AdamW if algorithm == "adamw" else torch.optim.Adam
    optim = kind(reference, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, foreach=False)
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    steps = [torch.zeros((), dtype=torch.float32) for _ in params]
    assert torch_fused.available(algorithm, params)
    for i in range(3):
        grads = tensors(10 + i)
        for r, g in zip(reference, grads, strict=True):
            r.grad = g.clone()
        optim.step()
        for t in steps:
            t.add_(1)  # the kernels read the count; the caller advances it
        torch_fused.adam_step(
            algorithm, params, [g.clone() for g in grads], m, v, steps,
            lr=1e-2, beta1=0.8, beta2=0.99, weight_decay=0.1, eps=1e-6,
        )  # fmt: skip
    for p, r in zip(params, reference, strict=True):
        torch.testing.assert_close(p, r.detach(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_kernel_steps_as_torch_optim_does(nesterov: bool) -> None:
    params = tensors(0)
    reference = [torch.nn.Parameter(p.clone()) for p in params]
    optim = torch.optim.SGD(
        reference, lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=nesterov,
        foreach=False,
    )  # fmt: skip
    bufs = [torch.zeros_like(p) for p in params]
    for i in range(3):
        grads = tensors(10 + i)
        for r, g in zip(reference, grads, strict=True):
            r.grad = g.clone()
        optim.step()
        torch_fused.sgd_step(
            params, [g.clone() for g in grads], bufs, lr=0.1, momentum=0.9, dampening=0.0,
            weight_decay=0.01, nesterov=nesterov, first=i == 0,
        )  # fmt: skip
    for p, r in zip(params, reference, strict=True):
        torch.testing.assert_close(p, r.detach(), rtol=1e-12, atol=1e-14)


def test_no_kernel_for_sparse_or_integer_tensors() -> None:
    assert not torch_fused.available("adamw", [torch.zeros(3, dtype=torch.int64)])
    assert not torch_fused.available("sgd", [torch.zeros(3).to_sparse()])
    assert not torch_fused.available("adam", [])
