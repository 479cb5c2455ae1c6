"""Build a Workload into a runnable training step on a device, in a precision: pure
(the model and batch cast to it) or mixed (fp32 ones, the forward under autocast).

Every call into the user's code (`model()`, `batch()`, `loss`, `optimizer`) is
wrapped so that a failure becomes a `WorkloadError` naming the part that raised,
and running out of device memory becomes an `OutOfMemoryError` that suggests a
smaller batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch

from lightspeed.dtypes import Precision, StepDtype
from lightspeed.errors import OutOfMemoryError, WorkloadError
from lightspeed.facts.device import Device
from lightspeed.facts.records import Phase
from lightspeed.measure.device import require, synchronizer, torch_dtype
from lightspeed.optimize.precision import autocast
from lightspeed.units import a_kind
from lightspeed.workload import PhaseHook, Workload

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepSettings:
    """Where and how a workload's step runs: `--device`, `--dtype` (`StepDtype`: bf16 is
    autocast with fp32 parameters, bf16-pure the model and batch cast)."""

    device: Device = Device.CPU
    dtype: StepDtype = StepDtype.FP32

    @property
    def precision(self) -> Precision:
        """The precision of the step's math (the lower one of a mixed step)."""
        return self.dtype.precision

    @property
    def mixed(self) -> bool:
        """Whether the step runs under autocast (mixed precision)."""
        return self.dtype.mixed


def _no_hook(phase: Phase) -> contextlib.AbstractContextManager[object]:
    return contextlib.nullcontext()


@dataclasses.dataclass
class PreparedStep:
    """A workload built on its device: model, optimizer and batch, ready to step."""

    workload: Workload
    settings: StepSettings
    model: torch.nn.Module
    # One optimizer, or a workload's named ones (`Workload.optimizers`).
    optimizer: torch.optim.Optimizer | Mapping[str, torch.optim.Optimizer]
    batch: Any
    sync: Callable[[], None]
    last_loss: torch.Tensor | None = None
    # Whether a step has shown that `loss` returns a scalar with a backward pass.
    loss_checked: bool = False

    def step(self, around: PhaseHook | None = None) -> torch.Tensor:
        """One training step; returns the loss (not synchronised).

        `around(phase)`, when given, is entered around each part of the step: zero_grad
        and the optimizer step (OPTIMIZER), the loss (FORWARD), backward (BACKWARD).
        Observers watch the step through it, so they watch the very calls it makes. A
        workload's own `step` runs instead of these parts, entering the same hook.
        """
        enter = around or _no_hook
        own_step = self.workload.step
        with guard(self.workload, "the training step"):
            if own_step is not None:
                loss = own_step(self.model, self.batch, self.optimizer, enter)
                self._check_once(loss, needs_backward=False)
            else:
                assert isinstance(self.optimizer, torch.optim.Optimizer)
                with enter(Phase.OPTIMIZER):
                    self.optimizer.zero_grad(set_to_none=True)
                with enter(Phase.FORWARD), guard(self.workload, "loss(model, batch)"):
                    loss = self.workload.loss(self.model, self.batch)
                self._check_once(loss, needs_backward=True)
                with enter(Phase.BACKWARD):
                    loss.backward()
                with enter(Phase.OPTIMIZER):
                    self.optimizer.step()
        self.last_loss = loss
        return loss

    def _check_once(self, loss: object, *, needs_backward: bool) -> None:
        if not self.loss_checked:
            _check_loss(self.workload, loss, needs_backward=needs_backward)
            self.loss_checked = True

    @property
    def parameter_tensors(self) -> int:
        """Number of trainable parameter tensors (shared ones counted once)."""
        return sum(1 for p in self.model.parameters() if p.requires_grad)

    @property
    def parameter_count(self) -> int:
        """Number of trainable parameter elements (shared tensors counted once)."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


def prepare(workload: Workload, settings: StepSettings) -> PreparedStep:
    """Build the model, optimizer and batch of `workload` on its device.

    The loss is checked (a scalar tensor with a backward pass) by the first step, so
    checking it costs no forward pass of its own.
    """
    device = require(settings.device)
    dtype = torch_dtype(settings.dtype.stored)
    workload = in_precision(workload, settings)
    name = workload.name
    model = _call(workload, "model()", workload.model)
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"workload {name!r}: model() returned {a_kind(model)}, not a torch.nn.Module."
        )
    with guard(workload, "moving the model to the device"):
        if not _already_on(model, device, dtype):
            model = model.to(device=device, dtype=dtype)
        model.train()
    raw_batch = _call(
        workload, f"batch({workload.batch_size})", workload.batch, workload.batch_size
    )
    with guard(workload, "moving the batch to the device"):
        batch = to_device(raw_batch, device, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise WorkloadError(f"workload {name!r}: the model has no trainable parameters.")
    optimizer: torch.optim.Optimizer | Mapping[str, torch.optim.Optimizer]
    if workload.optimizers is not None:
        optimizer = _call(workload, "optimizers(model)", workload.optimizers, model)
        if not isinstance(optimizer, Mapping) or not all(
            isinstance(o, torch.optim.Optimizer) for o in optimizer.values()
        ):
            raise WorkloadError(
                f"workload {name!r}: optimizers(model) returned {a_kind(optimizer)}, not a"
                " mapping of names to torch.optim.Optimizer."
            )
    else:
        optimizer = _call(workload, "optimizer(params)", workload.optimizer, params)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise WorkloadError(
                f"workload {name!r}: optimizer(params) returned {a_kind(optimizer)},"
                " not a torch.optim.Optimizer."
            )
    return PreparedStep(
        workload=workload,
        settings=settings,
        model=model,
        optimizer=optimizer,
        batch=batch,
        sync=synchronizer(settings.device),
    )


def in_precision(workload: Workload, settings: StepSettings) -> Workload:
    """`workload` as `settings.dtype` runs it: under autocast for a mixed step (the
    `optimize.precision.autocast` transform, which `lightspeed tune`'s amp candidate
    applies too), keeping its name; as it is otherwise (`prepare` casts a pure step's
    model and batch)."""
    if not settings.mixed:
        return workload
    return dataclasses.replace(autocast(workload, settings.precision), name=workload.name)


def _already_on(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `model.to(device, dtype)` would change nothing. Skipping it then keeps
    fake tensors (shape-only analysis), which it cannot swap in place, as they are."""
    tensors = itertools.chain(model.parameters(), model.buffers())
    return all(
        t.device.type == device.type
        and (t.device.index == device.index or device.index is None)
        and (t.dtype == dtype or not t.is_floating_point())
        for t in tensors
    )


def _check_loss(wl: Workload, loss: object, *, needs_backward: bool) -> None:
    returned = "its step" if wl.step is not None else "loss"
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = (
            type(loss).__name__
            if not isinstance(loss, torch.Tensor)
            else f"shape {tuple(loss.shape)}"
        )
        raise WorkloadError(
            f"workload {wl.name!r}: {returned} must return a scalar tensor, got {what}."
        )
    if needs_backward and not loss.requires_grad:
        raise WorkloadError(
            f"workload {wl.name!r}: the loss does not depend on any trainable parameter"
            " (it has no grad_fn), so there is no backward pass to study."
        )


def to_device(batch: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """`batch` with every tensor on `device`; floating tensors cast to `dtype`.

    Walks tuples, lists and dicts; other values pass through unchanged.
    """
    if isinstance(batch, torch.Tensor):
        if batch.is_floating_point():
            return batch.to(device=device, dtype=dtype)
        return batch.to(device=device)
    if isinstance(batch, dict):
        return {k: to_device(v, device, dtype) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [to_device(v, device, dtype) for v in batch]
        if hasattr(batch, "_fields"):  # a namedtuple
            return type(batch)(*moved)
        return type(batch)(moved)
    return batch


def _call(workload: Workload, what: str, fn: Callable[..., T], *args: Any) -> T:
    with guard(workload, what):
        return fn(*args)


@contextlib.contextmanager
def guard(workload: Workload, what: str) -> Iterator[None]:
    """Turn an exception from the user's code into a one-line WorkloadError."""
    try:
        yield
    except (torch.OutOfMemoryError, MemoryError) as exc:
        raise OutOfMemoryError(
            f"workload {workload.name!r} ran out of device memory in {what} at batch size"
            f" {workload.batch_size}; try a smaller --batch-size."
        ) from exc
    except WorkloadError:
        raise
    except RuntimeError as exc:
        # The CPU allocator reports exhaustion as a plain RuntimeError.
        if "can't allocate memory" in str(exc) or "not enough memory" in str(exc):
            raise OutOfMemoryError(
                f"workload {workload.name!r} ran out of memory in {what} at batch size"
                f" {workload.batch_size}; try a smaller --batch-size."
            ) from exc
        raise _workload_error(workload, what, exc) from exc
    except Exception as exc:
        raise _workload_error(workload, what, exc) from exc


def _workload_error(workload: Workload, what: str, exc: BaseException) -> WorkloadError:
    text = str(exc).strip()
    first_line = text.splitlines()[0] if text else ""
    return WorkloadError(
        f"workload {workload.name!r}: {what} raised {type(exc).__name__}: {first_line}"
        " (rerun with --debug for the traceback)"
    )
