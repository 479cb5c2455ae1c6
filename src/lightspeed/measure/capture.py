"""Capture every aten op of one training step: name, module, phase, shapes, FLOPs, bytes.

A `TorchDispatchMode` sees each op below autograd (after composite ops such as
`linear` decompose into `t` + `addmm`), which is the level at which kernels run and
costs are defined. torch's `ModuleTracker` says which module an op runs in, in the
forward and in the backward. The phase comes from which part of the step is running.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed.facts.records import OPTIMIZER_MODULE, OpRecord, Phase
from lightspeed.measure.costs.op_cost import attention_causal, op_cost
from lightspeed.measure.step import PreparedStep
from lightspeed.workload.tensor_walk import tensors_in
from lightspeed.workload.torch_internals import OrderedModuleTracker, name_modules, op_name

_GLOBAL = "Global"


class _OpCapture(TorchDispatchMode):
    """Records an OpRecord for every op dispatched while it is active."""

    def __init__(self, tracker: OrderedModuleTracker, root_name: str) -> None:
        super().__init__()
        self.tracker = tracker
        self.root_name = root_name
        self.phase = Phase.FORWARD
        self.records: list[OpRecord] = []

    def entering(self, phase: Phase) -> contextlib.AbstractContextManager[object]:
        """PreparedStep.step's hook: the ops that follow belong to `phase`."""
        self.phase = phase
        return contextlib.nullcontext()

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func.namespace in ("profiler", "prim"):  # markers and metadata queries, not computation
            return func(*args, **kwargs)
        # Shapes are read before the call: an in-place op may resize its output.
        input_shapes, input_dtypes = op_inputs((args, kwargs))
        layout = channels_last((args, kwargs))
        out = func(*args, **kwargs)
        cost = op_cost(func, args, kwargs, out)
        outputs = list(tensors_in(out))
        self.records.append(
            OpRecord(
                index=len(self.records),
                name=op_name(func),
                module=self._module(),
                phase=self.phase,
                input_shapes=input_shapes,
                input_dtypes=input_dtypes,
                output_shapes=tuple(tuple(t.shape) for t in outputs),
                output_dtypes=tuple(_dtype_name(t.dtype) for t in outputs),
                flops=cost.flops,
                macs=cost.macs,
                bytes_read=cost.bytes_read,
                bytes_written=cost.bytes_written,
                flops_known=cost.flops_known,
                causal=attention_causal(func, args, kwargs),
                channels_last=layout,
            )
        )
        return out

    def _module(self) -> str:
        if self.phase is Phase.OPTIMIZER:
            return OPTIMIZER_MODULE
        return module_path(self.tracker.parents, self.root_name, self.tracker.entered)


def op_inputs(arguments: Any) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """The shapes and dtype names of every tensor among an op's arguments, in order."""
    inputs = list(tensors_in(arguments))
    return tuple(tuple(t.shape) for t in inputs), tuple(_dtype_name(t.dtype) for t in inputs)


def channels_last(arguments: Any) -> bool | None:
    """Whether the first 4-D or 5-D tensor among an op's arguments that is in exactly one
    of the two layouts is channels-last (True) or plain contiguous (False); None when
    there is none. A tensor in both (one channel, one pixel: its layout does not matter)
    or in neither (an expanded gradient, a transposed view) says nothing."""
    for t in tensors_in(arguments):
        if t.dim() not in (4, 5):
            continue
        fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        last, plain = t.is_contiguous(memory_format=fmt), t.is_contiguous()
        if last != plain:
            return last
    return None


def module_path(parents: set[str], root_name: str, entered: Mapping[str, int] | None = None) -> str:
    """The fully qualified path, from the model root, of the innermost active module:
    of the active modules none of whose submodules is active, the last entered
    (`entered`, `OrderedModuleTracker`'s numbers), else the deepest. (In the backward a
    module and its only child, whose outputs are one tensor, are entered child first,
    so the last entered alone would be the parent.)

    `parents` holds ModuleTracker's names ("Root", "Root.layers.0", "Global"); the model
    root becomes "" and its submodules their FQN ("layers.0"). A module outside the
    model (a loss module built in `loss`) keeps its own name.
    """
    named = [p for p in parents if p != _GLOBAL]
    if not named:
        return ""
    leaves = [n for n in named if not any(other.startswith(n + ".") for other in named)]
    order = entered or {}
    innermost = max(leaves, key=lambda name: (order.get(name, -1), name.count("."), len(name)))
    if innermost == root_name:
        return ""
    if innermost.startswith(root_name + "."):
        return innermost[len(root_name) + 1 :]
    return innermost


def capture_step(prepared: PreparedStep) -> list[OpRecord]:
    """Run one training step of `prepared` and return its ops in dispatch order.

    The step is `PreparedStep.step()` with the capture watching its phases; only
    observation is added, so the parameters after it are the same as after an
    unobserved step.
    """
    with capturing(prepared) as capture:
        prepared.step(capture.entering)
    return capture.records


# Ops a Python dispatch mode adds to the step it watches: autograd detaches each tensor
# it saves for backward when a mode is active (and again when saved-tensor hooks unpack
# it), which an unobserved step never runs.
_MODE_ARTIFACTS = frozenset({"aten::detach"})


def without_mode_artifacts(ops: Sequence[OpRecord]) -> list[OpRecord]:
    """`ops` without those a dispatch mode may have added, renumbered.

    Such an op is one the mode is known to add that computes and moves nothing. The
    step's own detaches cannot be told from the added ones (how many autograd adds
    depends on which observers watch), so they go too: each is a view costing a
    microsecond, and the profiled step's time they take stays in its unattributed time.
    Leaving them out before timing keeps the alignment from skipping them one by one.
    """
    kept = [
        op for op in ops if not (op.name in _MODE_ARTIFACTS and op.flops == 0 and op.bytes == 0)
    ]
    return [dataclasses.replace(op, index=i) for i, op in enumerate(kept)]


def capture_forward(model: torch.nn.Module, *inputs: Any) -> list[OpRecord]:
    """The ops of one forward pass of `model` on `inputs`, without autograd.

    Works on the meta device, so the FLOPs of a model too large to run here can be
    counted from shapes alone.
    """
    with torch.no_grad(), capturing(model) as capture:
        model(*inputs)
    return capture.records


@contextlib.contextmanager
def capturing(target: PreparedStep | torch.nn.Module) -> Iterator[_OpCapture]:
    """Module tracking and op capture, both removed on exit even when the step raises."""
    model = target if isinstance(target, torch.nn.Module) else target.model
    tracker = OrderedModuleTracker()
    root_name = type(model).__name__
    name_modules(tracker, model, root_name)
    with tracker:
        capture = _OpCapture(tracker, root_name)
        with capture:
            yield capture


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
