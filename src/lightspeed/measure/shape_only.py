"""A training step analysed from shapes alone: built and run on fake tensors.

Under `torch_internals.fake_tensors()` the model, its optimizer state and every tensor
the step makes are tensors with shapes, dtypes and storages but no memory behind them,
and no kernel runs; every op still dispatches, with the decomposition the real step has
on the same device. The op capture and the memory measurement watch one step exactly as
they watch a real one, so a shape-only profile has the same ops, FLOPs, bytes and memory
categories as an executed one, and none of its times. A model too large for this
machine (a 7 B parameter one) is analysed this way in seconds.

The batch is made for real, then faked; its values are kept, since they can decide
shapes (a sequence's target lengths). An op whose fake kernel cannot say what it
returns — its result's shape depends on values (`_ctc_loss` on the batch's target
lengths), it has no fake kernel, or its fake kernel returns other shapes or dtypes than
the real one (`mkldnn_rnn_layer`'s workspace) — runs its real kernel on the batch's
values, or zeros in place of other fake tensors, but only when every integer or boolean
tensor it takes is one of the batch's: those are the values that decide shapes.
Otherwise the analysis stops with an error that names the op.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed import progress
from lightspeed.errors import WorkloadError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.measure.capture import capturing, without_mode_artifacts
from lightspeed.measure.device import require, torch_dtype
from lightspeed.measure.memory import measure_memory
from lightspeed.measure.step import PreparedStep, StepSettings, guard, prepare, to_device
from lightspeed.measure.workload_timing import prepared_info
from lightspeed.workload import Workload
from lightspeed.workload.tensor_walk import tensors_in
from lightspeed.workload.torch_internals import (
    DATA_DEPENDENT_ERRORS,
    adopt_fake_tensors,
    fake_tensors,
    op_name,
    run_real_kernel,
    without_dispatch_modes,
)

# Ops whose fake kernel returns other shapes or dtypes than the CPU kernel does: the
# oneDNN LSTM's workspace (its real kernel runs, on zeros).
_FAKE_RESULTS_DIFFER = frozenset({"aten::mkldnn_rnn_layer"})
# Ops whose fake kernel returns the right shapes but other dtypes: a layer norm of bf16
# input with fp32 weights (autocast), whose mean and rstd the CPU kernel keeps in fp32.
# The real kernel runs on one row (each leading dimension 1) to learn the dtypes, so a
# batch too large for this machine costs nothing.
_FAKE_DTYPES_DIFFER = frozenset({"aten::native_layer_norm"})


def profile_shape_only(
    workload: Workload,
    hardware: Hardware,
    settings: StepSettings | None = None,
    *,
    real_batch: bool = True,
) -> Profile:
    """One training step of `workload` analysed on fake tensors and placed on `hardware`:
    every op with its FLOPs and bytes, and the memory by category, in bytes; no times
    (`Profile.timing` is None, each op's `time_s` None).

    The step is decomposed as on `settings.device`, which this machine must have.
    `real_batch=False` makes the batch on fake tensors too, for a batch too large to
    hold here; an op whose shapes depend on the batch's values then cannot run.
    Raises WorkloadError when the workload raises, or uses an op whose result's shape
    depends on values that are not known (see the module's docstring).
    """
    with (
        fake_step(workload, settings, real_batch=real_batch) as prepared,
        progress.stage("capturing the step's ops and memory"),
        capturing(prepared) as capture,
    ):
        memory = measure_memory(prepared, capture.entering)
    return Profile(
        workload=prepared_info(prepared),
        hardware=hardware,
        timing=None,
        ops=tuple(without_mode_artifacts(capture.records)),
        memory=memory,
        torch_version=torch.__version__,
    )


@contextlib.contextmanager
def fake_step(
    workload: Workload, settings: StepSettings | None = None, *, real_batch: bool = True
) -> Iterator[PreparedStep]:
    """`workload` built on fake tensors, after one step (the optimizer's state made),
    with the fake tensors' mode active until exit: the next `step()` is the one to
    watch. Arguments as for `profile_shape_only`."""
    settings = settings or StepSettings()
    device, dtype = require(settings.device), torch_dtype(settings.dtype.stored)
    mode = fake_tensors()
    with (
        guard(workload, f"batch({workload.batch_size})"),
        mode if not real_batch else contextlib.nullcontext(),
    ):
        made = to_device(workload.batch(workload.batch_size), device, dtype)
    # The batch is fake like everything else, so each of its tensors is one storage
    # throughout; its real values stay at hand for the ops that need them.
    batch = pytree.tree_map(
        lambda value: (
            mode.from_tensor(value) if isinstance(value, torch.Tensor) and real_batch else value
        ),
        made,
    )
    values = (
        {id(fake): real for fake, real in zip(tensors_in(batch), tensors_in(made), strict=True)}
        if real_batch
        else {}
    )

    def model() -> torch.nn.Module:
        built = workload.model()
        if isinstance(built, torch.nn.Module):  # else `prepare` says what it is
            adopt_fake_tensors(built, mode, dtype, device)
        return built

    fake = dataclasses.replace(workload, model=model, batch=lambda _: batch)
    with _naming_data_dependent_ops(workload), mode, _RealKernelsWhereNeeded(mode, values):
        with progress.stage("building the model on fake tensors"), _building(dtype):
            prepared = prepare(fake, settings)
        with progress.stage("running a step on fake tensors"):
            prepared.step()  # the optimizer makes its state in its first step
        yield prepared


# What a fake kernel raises when it cannot say what an op returns.
_NO_FAKE_RESULT: tuple[type[Exception], ...] = (*DATA_DEPENDENT_ERRORS, NotImplementedError)


class _RealKernelsWhereNeeded(TorchDispatchMode):
    """Runs the real kernel of an op whose fake one cannot say what it returns (see the
    module's docstring); every other op goes on to the fake tensors' mode below."""

    def __init__(self, mode: Any, values: Mapping[int, torch.Tensor]) -> None:
        super().__init__()
        self._mode = mode
        self._values = values  # the real tensor of a fake one, by the fake's id

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = op_name(func)
        if name in _FAKE_DTYPES_DIFFER:
            return _layer_norm_with_real_dtypes(func, args, kwargs)
        if name not in _FAKE_RESULTS_DIFFER:
            try:
                return func(*args, **kwargs)
            except _NO_FAKE_RESULT:
                if not self._shape_values_known(args, kwargs):
                    raise
        return run_real_kernel(func, args, kwargs, self._mode, self._values)

    def _shape_values_known(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        """Whether the values of every integer or boolean tensor argument are known."""
        return all(
            id(t) in self._values or t.is_floating_point() or t.is_complex()
            for t in tensors_in((args, dict(kwargs)))
        )


def _layer_norm_with_real_dtypes(
    func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """`native_layer_norm`'s fake results, each in the dtype the real kernel gives it,
    learnt from the real kernel on one row of zeros."""
    fake = func(*args, **kwargs)
    x, normalized = args[0], tuple(args[1])
    one_row = (1,) * (x.dim() - len(normalized)) + normalized

    def row(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        shape = one_row if value is x else tuple(value.shape)
        return torch.zeros(shape, dtype=value.dtype, device=value.device)

    with without_dispatch_modes():  # a real kernel, on one row of real zeros
        real = func(*(row(a) for a in args), **{k: row(v) for k, v in kwargs.items()})
    return tuple(
        out if out.dtype == like.dtype else out.to(like.dtype)
        for out, like in zip(fake, real, strict=True)
    )


@contextlib.contextmanager
def _building(dtype: torch.dtype) -> Iterator[None]:
    """Floating tensors made in the precision the step runs in (fake parameters cannot
    be cast in place once made, so `prepare` must find nothing to cast), and quiet about
    `copy.deepcopy` reading a fake tensor's data pointer, which is harmless here."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            yield
    finally:
        torch.set_default_dtype(before)


@contextlib.contextmanager
def _naming_data_dependent_ops(workload: Workload) -> Iterator[None]:
    """Turn the error for an op that needs unknown values into one that says so."""
    try:
        yield
    except WorkloadError as exc:
        cause = exc.__cause__
        if isinstance(cause, DATA_DEPENDENT_ERRORS):
            op = str(cause).strip() or type(cause).__name__
            raise WorkloadError(
                f"workload {workload.name!r} uses {op}, whose result's shape depends on"
                " values computed in the step: it cannot be analysed from shapes alone;"
                " profile it by running it (without --shape-only)."
            ) from exc
        if isinstance(cause, RuntimeError) and "data is not allocated" in str(cause):
            raise WorkloadError(
                f"workload {workload.name!r} reads a tensor's values inside an operator:"
                " it cannot be analysed from shapes alone; profile it by"
                " running it (without --shape-only)."
            ) from exc
        raise
