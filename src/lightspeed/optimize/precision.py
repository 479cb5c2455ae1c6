"""Mixed precision: `Workload → Workload` whose forward runs under `torch.autocast`."""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from lightspeed.dtypes import TORCH_DTYPE_NAMES, Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.records import Phase
from lightspeed.workload import LossFn, PhaseHook, StepFn, Workload

AUTOCAST_PRECISIONS = (Precision.BF16, Precision.FP16)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossScaling:
    """A dynamic loss scaler's settings (torch.amp.GradScaler's, and its defaults): the
    loss is multiplied by `init_scale` before backward; a step whose gradients hold an
    inf or a NaN is skipped and the scale multiplied by `backoff_factor`; after
    `growth_interval` steps in a row without one, it is multiplied by `growth_factor`."""

    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000


def autocast(
    workload: Workload,
    dtype: str | Precision = Precision.BF16,
    *,
    loss_scaling: LossScaling | None = None,
) -> Workload:
    """`workload` with its forward and loss under `torch.autocast(dtype)`; named
    `"<name>+amp-bf16"` (or `-fp16`).

    Source: PyTorch's automatic mixed precision recipe (torch.amp docs, "Automatic Mixed
    Precision examples"): matmuls and convolutions run in `dtype` on the device the
    model's parameters are on, precision-sensitive ops (softmax, losses, norms) stay in
    fp32; backward and the optimizer step run outside autocast, and the parameters stay
    fp32 (master weights), so their gradients and the update are fp32 too.

    fp16 gets a dynamic loss scaler (`loss_scaling`, default `LossScaling()`: growth 2,
    back-off 0.5, interval 2000, through `torch.amp.GradScaler`), so that small
    gradients do not underflow fp16's range: the loss is scaled before backward, the
    gradients unscaled before the optimizer steps, and a step with an inf or a NaN
    gradient skipped (`loss_scaler(optimizer)` gives a prepared step's scaler). bf16 has
    fp32's range and needs none.

    Preconditions: the model is built in fp32 (a step run at `--dtype bf16-pure` casts
    the parameters themselves and leaves autocast nothing to do; `--dtype bf16` is this
    transform, `measure.step.in_precision`). A workload with its own
    `step` gets autocast around each part it runs inside `phase(Phase.FORWARD)`, and
    autocast turned off in every other phase; its fp16 loss scaling is its own to do.

    Equivalence: not bitwise. The loss and gradients are those of the fp32 step within
    the rounding of `dtype` (8 mantissa bits for bf16, 11 for fp16) accumulated over the
    forward; parameter names, shapes and dtypes are unchanged.
    """
    precision = Precision.parse(dtype.value if isinstance(dtype, Precision) else dtype, "dtype")
    if precision not in AUTOCAST_PRECISIONS:
        allowed = ", ".join(p.value for p in AUTOCAST_PRECISIONS)
        raise ConfigError(
            f"autocast: dtype {precision.value!r} is not a lower precision to autocast to;"
            f" choose one of {allowed}."
        )
    torch_dtype: torch.dtype = getattr(torch, TORCH_DTYPE_NAMES[precision])
    inner_loss = workload.loss

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        with torch.autocast(device_type=device_type(model), dtype=torch_dtype):
            return inner_loss(model, batch)

    if workload.step is not None:
        step: StepFn | None = _autocast_step(workload.step, torch_dtype)
    elif precision is Precision.FP16:
        step = _scaled_step(loss, loss_scaling or LossScaling())
    else:
        step = None
    return dataclasses.replace(
        workload, name=f"{workload.name}+amp-{precision.value}", loss=loss, step=step
    )


# Each optimizer's loss scaler, made by its first scaled step.
_SCALERS: weakref.WeakKeyDictionary[torch.optim.Optimizer, torch.amp.GradScaler] = (
    weakref.WeakKeyDictionary()
)


def loss_scaler(optimizer: torch.optim.Optimizer) -> torch.amp.GradScaler | None:
    """The loss scaler of the fp16 steps that `optimizer` has taken (None: none yet)."""
    return _SCALERS.get(optimizer)


def _scaled_step(loss_fn: LossFn, scaling: LossScaling) -> StepFn:
    """The default step (zero_grad, loss, backward, optimizer) with the loss scaled."""

    def run(model: nn.Module, batch: Any, optimizer: Any, phase: PhaseHook) -> torch.Tensor:
        scaler = _SCALERS.get(optimizer)
        if scaler is None:
            scaler = torch.amp.GradScaler(
                device_type(model),
                init_scale=scaling.init_scale,
                growth_factor=scaling.growth_factor,
                backoff_factor=scaling.backoff_factor,
                growth_interval=scaling.growth_interval,
            )
            _SCALERS[optimizer] = scaler
        with phase(Phase.OPTIMIZER):
            optimizer.zero_grad(set_to_none=True)
        with phase(Phase.FORWARD):
            loss = loss_fn(model, batch)
        with phase(Phase.BACKWARD):
            scaler.scale(loss).backward()
        with phase(Phase.OPTIMIZER):
            scaler.step(optimizer)
            scaler.update()
        return loss

    return run


def device_type(model: nn.Module) -> str:
    """The device type ("cpu", "cuda") of the model's first parameter or buffer; "cpu"
    for a model with neither."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device.type
    return "cpu"


def _autocast_step(step: StepFn, dtype: torch.dtype) -> StepFn:
    def run(model: nn.Module, batch: Any, optimizer: Any, phase: PhaseHook) -> torch.Tensor:
        device = device_type(model)

        @contextlib.contextmanager
        def entering(part: Phase) -> Iterator[None]:
            # Off outside the forward, so that a backward or an update the step nests
            # inside its forward phase still runs in the parameters' precision.
            enabled = part is Phase.FORWARD
            with phase(part), torch.autocast(device_type=device, dtype=dtype, enabled=enabled):
                yield

        return step(model, batch, optimizer, entering)

    return run
