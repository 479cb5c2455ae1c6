"""Mixed precision: `Workload → Workload` whose forward runs under `torch.autocast`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from lightspeed.dtypes import TORCH_DTYPE_NAMES, Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.records import Phase
from lightspeed.workload import PhaseHook, StepFn, Workload

AUTOCAST_PRECISIONS = (Precision.BF16, Precision.FP16)


def autocast(workload: Workload, dtype: str | Precision = Precision.BF16) -> Workload:
    """`workload` with its forward and loss under `torch.autocast(dtype)`; named
    `"<name>+amp-bf16"` (or `-fp16`).

    Source: PyTorch's automatic mixed precision recipe (torch.amp docs, "Automatic Mixed
    Precision examples"): matmuls and convolutions run in `dtype` on the device the
    model's parameters are on, precision-sensitive ops (softmax, losses, norms) stay in
    fp32; backward and the optimizer step run outside autocast, and the parameters stay
    fp32 (master weights), so their gradients and the update are fp32 too.

    Preconditions: the model is built in fp32 (a step run at `--dtype bf16` casts the
    parameters themselves and leaves autocast nothing to do). fp16 gets no loss scaling
    here: small gradients may underflow; a dynamic loss scaler is the tuner's to add.
    A workload with its own `step` gets autocast around each part it runs inside
    `phase(Phase.FORWARD)`, and autocast turned off in every other phase.

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

    step = None if workload.step is None else _autocast_step(workload.step, torch_dtype)
    return dataclasses.replace(
        workload, name=f"{workload.name}+amp-{precision.value}", loss=loss, step=step
    )


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
