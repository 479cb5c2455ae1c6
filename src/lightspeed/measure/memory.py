"""Memory of one training step by category, and its peak, in bytes.

`measure_memory` runs one step of a prepared workload exactly as `PreparedStep.step()`
does while two interceptions watch it:

- `_StorageTimeline`, a TorchDispatchMode, sees every aten op's outputs. An output
  storage that is none of the op's input storages is a new allocation and becomes live;
  a `weakref.finalize` on it records when it is freed. Storages alive before the step
  (parameters, gradients, optimizer state, the batch, buffers) start the timeline. The
  result is the list of allocations and frees, the most live bytes, and the moment of it.
- `torch.autograd.graph.saved_tensors_hooks` around the forward see every tensor
  autograd saves for backward.

After the step every storage gets one category, the first that applies: parameters,
inputs, gradients (some `p.grad` after the step), optimizer_state (in `optimizer.state`),
activations (saved for backward), temporaries (anything else, model buffers included,
as `MemoryBreakdown` defines them). Sizes are whole storages (`untyped_storage().nbytes()`),
each counted once however many tensors view it, so tied weights count once.

On the CPU the peak is the timeline's (method "tracked-storages"). On CUDA (method
"cuda-allocator") it is the tracked GPU bytes live at the step's start plus the caching
allocator's growth over the step (`max_memory_allocated()` after it minus
`memory_allocated()` before it; memory other code holds on the GPU stays out; a step on
fake tensors, which allocates nothing, keeps the timeline's peak), so
allocator rounding, kernel workspaces and buffers no op returns are in it. Those are what
the timeline cannot see, so `at_peak_bytes` is the timeline's breakdown at its own peak
with the difference counted as temporaries (`fit_to_peak`). Only GPU storages are on
that timeline; the per-category totals count every tensor wherever it lives (AdamW's
step counters stay on the CPU). It resets the device's peak-memory statistics.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed.facts.device import Device
from lightspeed.facts.records import MEMORY_CATEGORIES, MemoryBreakdown, MemoryOverStep, Phase
from lightspeed.measure.step import PreparedStep
from lightspeed.optimize.checkpointing import observing_kept
from lightspeed.workload import PhaseHook
from lightspeed.workload.tensor_walk import tensors_in
from lightspeed.workload.torch_internals import is_fake, storage_identity

CATEGORIES = MEMORY_CATEGORIES
_OTHER = "temporaries"
# Points kept of the bytes live over a step: enough for a chart a screen wide, few
# enough that a large model's step keeps its JSON small.
OVER_STEP_POINTS = 2000


def measure_memory(prepared: PreparedStep, watch: PhaseHook | None = None) -> MemoryBreakdown:
    """Run one training step of `prepared` and return the bytes it holds, by category.

    Run it after a warm-up step, so the optimizer state already exists. The step is the
    one `PreparedStep.step()` runs, with the same result; `prepared.last_loss` is set.
    `watch`, a phase hook of another observer (the op capture), watches the same step.
    """
    # A step on fake tensors (shape-only analysis) allocates nothing on the GPU: its peak
    # is the timeline's, as on the CPU.
    on_cuda = prepared.settings.device is Device.CUDA and not any(
        is_fake(p) for p in prepared.model.parameters()
    )
    # Python's collector frees what reference cycles hold (checkpoint's recompute keeps
    # its tensors in one) when its allocation counts say so; starting from a collection,
    # it runs at the same points of every run of the step, so the peak is repeatable.
    gc.collect()
    if on_cuda:
        prepared.sync()
        torch.cuda.reset_peak_memory_stats()
        allocated_before = torch.cuda.memory_allocated()
    timeline = _StorageTimeline(prepared.settings.device.value)
    with timeline:
        _adopt_live_state(prepared, timeline)
        loss = _run_step(prepared, timeline, watch)
        # Labelled while still tracked: this step made the gradients (and, without a
        # warm-up, the optimizer state), and their storages are live now.
        gradients, state = _gradients(prepared), _optimizer_state(prepared)
        timeline.label(gradients, "gradients")
        timeline.label(state, "optimizer_state")
    prepared.last_loss = loss
    at_peak = timeline.at_peak()
    peak_bytes = timeline.peak_bytes
    method = "tracked-storages"
    if on_cuda:
        prepared.sync()
        growth = torch.cuda.max_memory_allocated() - allocated_before
        peak_bytes = timeline.start_bytes + max(growth, 0)
        at_peak = fit_to_peak(at_peak, peak_bytes)
        method = "cuda-allocator"
    return MemoryBreakdown(
        parameters_bytes=_unique_bytes(prepared.model.parameters()),
        gradients_bytes=_unique_bytes(gradients),
        optimizer_state_bytes=_unique_bytes(state),
        activations_bytes=timeline.most_live("activations"),
        temporaries_bytes=at_peak[_OTHER],
        inputs_bytes=_unique_bytes(tensors_in(prepared.batch)),
        peak_bytes=peak_bytes,
        at_peak_bytes=at_peak,
        method=method,
        over_step=timeline.over_step(OVER_STEP_POINTS),
    )


def fit_to_peak(at_peak: dict[str, int], peak_bytes: int) -> dict[str, int]:
    """`at_peak` adjusted to sum to `peak_bytes`: the difference is temporaries.

    When the tracked categories exceed `peak_bytes`, temporaries shrink first, then the
    others scale down in proportion (largest remainders round up), so the sum is exact.
    """
    fitted = dict(at_peak)
    excess = sum(fitted.values()) - peak_bytes
    taken = min(excess, fitted[_OTHER])  # all of a negative excess: temporaries grow
    fitted[_OTHER] -= taken
    excess -= taken
    if excess == 0:
        return fitted
    kept = sum(fitted.values())  # > peak_bytes >= 0 here
    exact = {name: n * peak_bytes / kept for name, n in fitted.items()}
    fitted = {name: int(share) for name, share in exact.items()}
    by_remainder = sorted(exact, key=lambda name: exact[name] - fitted[name], reverse=True)
    for name in by_remainder[: peak_bytes - sum(fitted.values())]:
        fitted[name] += 1
    return fitted


def _run_step(
    prepared: PreparedStep, timeline: _StorageTimeline, watch: PhaseHook | None
) -> torch.Tensor:
    # PreparedStep.step(), with the forward under the saved-tensor hooks.
    recorder = _SavedTensorRecorder(timeline)

    def around(phase: Phase) -> contextlib.AbstractContextManager[object]:
        both = contextlib.ExitStack()
        if watch is not None:
            both.enter_context(watch(phase))
        if phase is Phase.FORWARD:
            both.enter_context(recorder)
        both.enter_context(timeline.phase(phase))
        return both

    try:
        return prepared.step(around)
    finally:
        recorder.release()


def _adopt_live_state(prepared: PreparedStep, timeline: _StorageTimeline) -> None:
    # The order is the categories' priority: a storage takes the first label it gets.
    timeline.adopt(prepared.model.parameters(), "parameters")
    timeline.adopt(tensors_in(prepared.batch), "inputs")
    timeline.adopt(_gradients(prepared), "gradients")
    timeline.adopt(_optimizer_state(prepared), "optimizer_state")
    timeline.adopt(prepared.model.buffers(), _OTHER)


class _StorageTimeline(TorchDispatchMode):
    """Every storage live during the step on one device type, with its size and category.

    `_events` holds +token when a storage becomes live and -token when it is freed; a
    token names one storage for the whole step (addresses are reused after a free).
    """

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self._device_type = device_type
        self._tokens = itertools.count(1)
        self._live: dict[int, int] = {}  # storage address (_cdata) -> token
        self._size: dict[int, int] = {}  # token -> bytes
        self._category: dict[int, str] = {}  # token -> category; unlabelled: temporaries
        self._events: list[int] = []
        self._event_ops: list[int] = []  # ops dispatched when each event happened
        self._ops = 0
        self._start_events = 0  # events that adopted the state alive before the step
        self._phases: list[tuple[str, int, int]] = []
        self._finalizers: list[weakref.finalize[Any, Any]] = []
        # Frees arrive from finalizers, which may run on autograd's device threads.
        self._lock = threading.RLock()
        self._live_bytes = 0
        self.start_bytes = 0
        self.peak_bytes = 0
        self._peak_event = 0  # events[:_peak_event] lead to the peak

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._ops += 1
        # Views and in-place ops return an input's storage: nothing new was allocated.
        inputs = {key[0] for t in tensors_in((args, kwargs)) if (key := storage_identity(t))}
        for tensor in tensors_in(out):
            key = storage_identity(tensor)
            if key is not None and key[0] not in inputs:
                self._track(tensor, key)
        return out

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        try:
            super().__exit__(exc_type, exc_val, exc_tb)
        finally:
            for finalizer in self._finalizers:
                finalizer.detach()

    def adopt(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        """Track `tensors`' storages as live from the start of the step, and label them."""
        tensors = list(tensors)
        for tensor in tensors:
            key = storage_identity(tensor)
            if key is not None:
                self._track(tensor, key)
        self.start_bytes = self._live_bytes
        self._start_events = len(self._events)
        self.label(tensors, category)

    def label(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        """Give the live storages of `tensors` `category`, unless they have one already."""
        for tensor in tensors:
            key = storage_identity(tensor)
            token = self._live.get(key[0]) if key is not None else None
            if token is not None:
                self._category.setdefault(token, category)

    @contextlib.contextmanager
    def phase(self, phase: Phase) -> Iterator[None]:
        """Note the ops run inside as `phase`'s span of the step."""
        first = self._ops
        try:
            yield
        finally:
            if self._ops > first:
                self._phases.append((phase.value, first, self._ops))

    def over_step(self, max_points: int) -> MemoryOverStep:
        """Bytes live by category after each allocation and free of the step, at most
        `max_points` of them: the largest and smallest of each run of points are kept,
        so the peak always is."""
        live = dict.fromkeys(CATEGORIES, 0)
        points: list[tuple[int, tuple[int, ...]]] = []
        for i, (event, ops) in enumerate(zip(self._events, self._event_ops, strict=True)):
            token = abs(event)
            live[self._category.get(token, _OTHER)] += (
                self._size[token] if event > 0 else -self._size[token]
            )
            # The state alive before the step is one point, its start.
            if i + 1 >= self._start_events:
                points.append((ops, tuple(live.values())))
        kept = sample_extremes(points, max_points)
        return MemoryOverStep(
            op_index=tuple(ops for ops, _ in kept),
            bytes={name: tuple(sizes[i] for _, sizes in kept) for i, name in enumerate(CATEGORIES)},
            phases=tuple(self._phases),
        )

    def at_peak(self) -> dict[str, int]:
        """Bytes live at the peak, by category; they sum to `peak_bytes`."""
        live: set[int] = set()
        for event in self._events[: self._peak_event]:
            if event > 0:
                live.add(event)
            else:
                live.discard(-event)
        totals = dict.fromkeys(CATEGORIES, 0)
        for token in live:
            totals[self._category.get(token, _OTHER)] += self._size[token]
        return totals

    def most_live(self, category: str) -> int:
        """The most bytes of `category` live at once during the step."""
        most = live = 0
        for event in self._events:
            token = abs(event)
            if self._category.get(token) == category:
                live += self._size[token] if event > 0 else -self._size[token]
                most = max(most, live)
        return most

    def _track(self, tensor: torch.Tensor, key: tuple[int, int]) -> None:
        address, nbytes = key
        if tensor.device.type != self._device_type:
            return
        with self._lock:
            token = self._live.get(address)
            if token is not None and self._size[token] == nbytes:
                return
            if token is not None:  # resized in place (an out= op): a free, then a new one
                self._free(address)
            token = next(self._tokens)
            self._live[address] = token
            self._size[token] = nbytes
            self._events.append(token)
            self._event_ops.append(self._ops)
            self._live_bytes += nbytes
            if self._live_bytes > self.peak_bytes:
                self.peak_bytes = self._live_bytes
                self._peak_event = len(self._events)
        storage = tensor.untyped_storage()  # one Python object per storage, freed with it
        self._finalizers.append(weakref.finalize(storage, self._free, address))

    def _free(self, address: int) -> None:
        with self._lock:
            token = self._live.pop(address, None)
            if token is not None:
                self._events.append(-token)
                self._event_ops.append(self._ops)
                self._live_bytes -= self._size[token]


def sample_extremes(
    points: list[tuple[int, tuple[int, ...]]], max_points: int
) -> list[tuple[int, tuple[int, ...]]]:
    """At most `max_points` of `points`, in order: of each run of consecutive points, the
    one with the most bytes live and the one with the least (the first of equals), and
    the last point, where the step ends. `max_points` is at least 3."""
    if len(points) <= max_points:
        return points
    runs = (max_points - 1) // 2
    kept: list[tuple[int, tuple[int, ...]]] = []
    for r in range(runs):
        run = points[r * len(points) // runs : (r + 1) * len(points) // runs]
        totals = [sum(sizes) for _, sizes in run]
        low = totals.index(min(totals))
        high = totals.index(max(totals))
        kept += [run[i] for i in sorted({low, high})]
    if kept[-1] is not points[-1]:
        kept.append(points[-1])
    return kept


class _Packed:
    """What the pack hook saves in place of a tensor: the tensor, until released."""

    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor: torch.Tensor | None = tensor


class _SavedTensorRecorder:
    """Labels every storage autograd saves for backward "activations", changing nothing.

    The pack hook keeps the tensor itself, grad_fn included, so double backward still
    works. For a saved op output that is a reference cycle (tensor -> grad_fn -> saved
    tensor) which only backward breaks; `release()` after the step breaks the cycles of
    graphs backward never ran through (a branch the loss discarded, or all of them after
    an exception), which would otherwise never be freed.
    """

    def __init__(self, timeline: _StorageTimeline) -> None:
        self._timeline = timeline
        self._packed: weakref.WeakSet[_Packed] = weakref.WeakSet()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        # What op-level checkpointing keeps itself, beside what autograd saves; one
        # context a forward (a workload's own step may run several).
        self._kept: list[contextlib.AbstractContextManager[None]] = []

    def __enter__(self) -> None:
        self._hooks.__enter__()
        kept = observing_kept(lambda tensors: self._timeline.label(tensors, "activations"))
        kept.__enter__()
        self._kept.append(kept)

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self._kept.pop().__exit__(exc_type, exc_val, exc_tb)
        self._hooks.__exit__(exc_type, exc_val, exc_tb)

    def _pack(self, tensor: torch.Tensor) -> _Packed:
        self._timeline.label((tensor,), "activations")
        packed = _Packed(tensor)
        self._packed.add(packed)
        return packed

    def release(self) -> None:
        """Drop the tensors still saved by graphs that backward did not run through."""
        for packed in list(self._packed):
            packed.tensor = None

    @staticmethod
    def _unpack(packed: _Packed) -> torch.Tensor:
        if packed.tensor is None:
            raise RuntimeError("a tensor saved during lightspeed's memory measurement was released")
        return packed.tensor


def _gradients(prepared: PreparedStep) -> list[torch.Tensor]:
    return [p.grad for p in prepared.model.parameters() if p.grad is not None]


def _optimizer_state(prepared: PreparedStep) -> list[torch.Tensor]:
    given = prepared.optimizer
    optimizers = [given] if isinstance(given, torch.optim.Optimizer) else list(given.values())
    return list(tensors_in([list(o.state.values()) for o in optimizers]))


def _unique_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages of `tensors` (views and tied tensors count once)."""
    sizes = dict(key for t in tensors if (key := storage_identity(t)) is not None)
    return sum(sizes.values())
