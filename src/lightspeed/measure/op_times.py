"""Measure the time of each captured op by profiling the step again: `profile_op_times`.

The op capture (a TorchDispatchMode) gives the ordered aten op names of one step but no
honest times: the mode's own Python cost would swamp small ops. So the same, warmed-up
step runs again under `torch.profiler`, each step inside a `lightspeed::step` range, and
`op_alignment.align_ops` matches that step's op events to the captured names.

The time of a matched op, per step:
- on the CPU, the inclusive wall time of its event: it contains the lower-level aten calls
  its kernel makes, which the dispatch mode never saw as separate ops;
- on CUDA, the total time of the GPU kernels launched under its event (children
  included), so `device_time` is True.
With several steps, an op's time is the median over the steps where it was matched.
The ops a dispatch mode itself adds to the step it watches (the `detach` autograd
applies to tensors saved for backward while a Python mode is active) are left out of
the names before they get here (`capture.without_mode_artifacts`); a captured op that
still has no event stays None. One step runs under the profiler before the timed ones, outside any
STEP_RANGE, so the profiler's start-up cost lands in no op.

Nothing is dropped: `unattributed_s` is the step's wall time that no matched op accounts
for (Python and framework overhead, the autograd engine, ops left unmatched, and on a GPU
the time it sat idle). It is clamped at zero; it would only come out negative if matched
times overlap (kernels of several CUDA streams at once) or, with several steps, when the
sum of per-op medians exceeds the median step, and then `attributed_s` alone exceeds
`profiled_step_s`. Otherwise attributed_s + unattributed_s == profiled_step_s exactly.

The profiler is driven from this module only; `op_alignment` sees plain `OpEvent`s.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Sequence

from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from lightspeed.facts.device import Device
from lightspeed.measure.native_stderr import profiler_chatter_dropped
from lightspeed.measure.op_alignment import OpEvent, align_ops
from lightspeed.measure.step import PreparedStep, guard

logger = logging.getLogger(__name__)

# The profiler range around each profiled step, which splits the events by step.
STEP_RANGE = "lightspeed::step"
# Below this fraction of captured ops matched, the attribution deserves a warning.
LOW_MATCH_WARN_FRACTION = 0.9


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpTimes:
    """The measured time of each captured op of a step, and of the step itself.

    `times_s[i]` is the time in seconds of the i-th captured op (CPU time on the CPU,
    GPU kernel time on CUDA: see `device_time`), None when no profiled event matched it.
    `profiled_step_s`: wall seconds of one profiled step (median over `steps`), device
    synchronised. `attributed_s`: the sum of the matched ops' times. `unattributed_s`:
    the rest of the step, never negative (see the module docstring). `matched`: how many
    captured ops have a time.
    """

    times_s: tuple[float | None, ...]
    profiled_step_s: float
    attributed_s: float
    unattributed_s: float
    matched: int
    steps: int
    device_time: bool

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"OpTimes needs at least one step, got {self.steps}")
        if self.matched != sum(t is not None for t in self.times_s):
            raise ValueError("OpTimes.matched must count the ops that have a time")
        if self.unattributed_s < 0 or self.attributed_s < 0:
            raise ValueError("attributed and unattributed times cannot be negative")


def at_timed_step(times: OpTimes, timed_step_s: float) -> OpTimes:
    """A device's `times` on the step as timed without the profiler: the kernels' times
    kept (the device's own, which host-side instrumentation does not slow), the step the
    larger of `timed_step_s` and their sum, the unattributed time the rest.

    Under torch.profiler the host records every op, so a step bound by its launches runs
    longer (an H200's BERT-base step in bf16: 43.5 ms profiled, 19.3 ms timed, over 15.3
    ms of kernels either way), and the time outside ops, read from the profiled step,
    would be the profiler's rather than the step's. CPU times are the host's own, taken
    with it: they are left as profiled."""
    if not times.device_time:
        return times
    step_s = max(timed_step_s, times.attributed_s)
    return dataclasses.replace(
        times, profiled_step_s=step_s, unattributed_s=step_s - times.attributed_s
    )


def profile_op_times(
    prepared: PreparedStep, op_names: Sequence[str], steps: int = 1, *, absorb: bool = True
) -> OpTimes:
    """Profile `steps` training steps and time each op of `op_names` (aten names, in order).

    `op_names` are the ops a dispatch mode captured of one step of `prepared`, in
    dispatch order ("aten::mm"); the step should be warmed up (optimizer state created)
    so the profiled steps run the same ops. With `absorb`, one step runs first under the
    profiler, unread, to take its set-up cost; a step of seconds can do without.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    on_cuda = prepared.settings.device is Device.CUDA
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    prepared.sync()  # no earlier work may run inside the first profiled step
    with (
        profiler_chatter_dropped(),
        profile(activities=activities, record_shapes=False) as prof,
        guard(prepared.workload, "the profiled step"),
    ):
        # The first ops after the profiler starts pay for its set-up (hundreds of µs on
        # the CPU); one step outside any STEP_RANGE absorbs that and is never read.
        if absorb:
            prepared.step()
            prepared.sync()
        for _ in range(steps):
            with record_function(STEP_RANGE):
                prepared.step()
                # The step's range ends when its kernels have finished, not when the
                # CPU has queued them.
                prepared.sync()
    per_step = [
        _step_times(op_names, step_events, on_cuda)
        for step_events in _split_steps(list(prof.events()))
    ]
    return _combine(per_step, len(op_names), on_cuda)


@dataclasses.dataclass(frozen=True)
class _StepTimes:
    """One profiled step: its wall nanoseconds, and each captured op's nanoseconds or None."""

    span_ns: int
    op_ns: list[int | None]


# One profiled step: its STEP_RANGE event, and the CPU events inside it.
_StepEvents = tuple[FunctionEvent, list[FunctionEvent]]


def _ns(us: float) -> int:
    # The profiler stores integer nanoseconds divided by 1000; this undoes it.
    return round(us * 1000)


def _is_cpu_range(event: FunctionEvent) -> bool:
    # A `record_function` range is recorded twice on CUDA: once on the CPU and once as a
    # GPU annotation; only the CPU one brackets the op events.
    return not event.is_async and event.device_type == DeviceType.CPU


def _split_steps(events: list[FunctionEvent]) -> list[_StepEvents]:
    """Each STEP_RANGE event, with the CPU events (all threads) that lie inside it."""
    ranges = sorted(
        (e for e in events if e.name == STEP_RANGE and _is_cpu_range(e)),
        key=lambda e: e.time_range.start,
    )
    ops = [e for e in events if e.name != STEP_RANGE and _is_cpu_range(e)]
    return [
        (
            step,
            [
                e
                for e in ops
                if step.time_range.start <= e.time_range.start
                and e.time_range.end <= step.time_range.end
            ],
        )
        for step in ranges
    ]


def _step_times(op_names: Sequence[str], step: _StepEvents, on_cuda: bool) -> _StepTimes:
    """Align one step's events to `op_names` and read each matched op's time."""
    step_range, function_events = step
    index = {id(e): k for k, e in enumerate(function_events)}
    events = [
        OpEvent(
            name=e.name,
            start_ns=_ns(e.time_range.start),
            end_ns=_ns(e.time_range.end),
            # A parent outside the step (its range) counts as none.
            parent=None if e.cpu_parent is None else index.get(id(e.cpu_parent)),
            thread=int(e.thread),
        )
        for e in function_events
    ]
    matches = align_ops(op_names, events)
    op_ns: list[int | None] = []
    for k in matches:
        if k is None:
            op_ns.append(None)
        elif on_cuda:
            # Kernels launched under the event and under all its children.
            op_ns.append(_ns(function_events[k].device_time_total))
        else:
            op_ns.append(events[k].end_ns - events[k].start_ns)
    span_ns = _ns(step_range.time_range.end) - _ns(step_range.time_range.start)
    return _StepTimes(span_ns=span_ns, op_ns=op_ns)


def _combine(per_step: list[_StepTimes], op_count: int, on_cuda: bool) -> OpTimes:
    """Per-op medians over the steps, and the step's split into attributed and not."""
    if not per_step:
        raise RuntimeError(
            f"the profiler recorded no {STEP_RANGE!r} range; is another profiler active?"
        )
    times_s: list[float | None] = []
    for op in range(op_count):
        seen = [ns for s in per_step if (ns := s.op_ns[op]) is not None]
        # median_low keeps whole nanoseconds: a time some step really took.
        times_s.append(statistics.median_low(seen) / 1e9 if seen else None)
    matched = [t for t in times_s if t is not None]
    attributed_s = sum(matched)
    span_s = statistics.median_low(s.span_ns for s in per_step) / 1e9
    unattributed_s = max(0.0, span_s - attributed_s)
    if unattributed_s > 0:
        # a + (p - a) can round one ulp away from p; storing the sum keeps the identity
        # attributed + unattributed == profiled exact at a cost of one rounding in p.
        span_s = attributed_s + unattributed_s
    if op_count and len(matched) < LOW_MATCH_WARN_FRACTION * op_count:
        logger.warning(
            "only %d of %d captured ops matched a profiled event; their time is unattributed",
            len(matched),
            op_count,
        )
    return OpTimes(
        times_s=tuple(times_s),
        profiled_step_s=span_s,
        attributed_s=attributed_s,
        unattributed_s=unattributed_s,
        matched=len(matched),
        steps=len(per_step),
        device_time=on_cuda,
    )
