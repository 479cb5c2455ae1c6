"""A downsampled timeline of one step of a rank, for a report to draw without the trace.

Which step: one a reader would take as typical. The first ProfilerStep is often a
warm-up (allocator, autotuning) and the last is often cut short by the profiler's stop
(HolisticTraceAnalysis leaves it out), so with three or more steps the candidates are
the steps between them; with two, the first; with one, that one. Among the candidates
it is the median by its length on the host (of an even count the shorter middle one;
equal lengths: the earlier), so one trace always gives the same step. A trace without
ProfilerSteps is shown whole.

The window is the step on the host widened to its span on the device
(`steps.device_step_spans`: the device lags the host). Every event of a lane that
overlaps the window is drawn, cut to it: a time slice, as a trace viewer shows it.

Lanes: host threads (by thread id), then device streams (by device, then stream). A host
lane holds the top-level CPU ops (`steps.top_level`; ProfilerStep marks are not ops),
host-side collectives among them as collectives (`names.is_host_collective`, annotations
such as `gloo:all_reduce` too: a CPU-only run's steps are often nothing else), and the
outermost host syncs (`names.is_host_sync`: synchronize calls, blocking copies, an
`aten::item` that waited on the device, `host.blocking_sync_ops`); a sync cuts the op it
runs inside, which is drawn around it, so the host's waits show. A device lane holds
kernels (`^nccl.*Kernel` ones, as `names.kernel_type` says, as collectives) and memory
copies and sets. A lane is one row: its events never overlap.

Downsampling (`trace.downsample`), so that a large trace still draws quickly: on each
lane, runs of events shorter than 1/RESOLUTION of the window (about a pixel) merge into
blocks named "N events"; then at most MAX_EVENTS are kept, the longest. Times are
seconds from the window's start, rounded to the nanosecond, the finest a trace records.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from lightspeed.trace.downsample import Blocks, downsample, group
from lightspeed.trace.events import US, EventTable, FloatArray, IntArray, Kind
from lightspeed.trace.host import shared_host_index
from lightspeed.trace.names import KERNEL_TYPES, BoolArray, KernelType, profiler_step
from lightspeed.trace.steps import StepWindow, top_level, whole_window
from lightspeed.trace.window import TraceContext

# An event shorter than the window / RESOLUTION (a pixel of a wide drawing) may merge.
RESOLUTION = 2000
MAX_EVENTS = 20_000


class Category(str, enum.Enum):
    """What a drawn block is."""

    CPU_OP = "cpu-op"
    KERNEL = "kernel"
    COLLECTIVE = "collective"
    MEMORY = "memory"
    SYNC = "sync"
    MERGED = "merged"


CATEGORIES = tuple(Category)  # a category's position is its code in the columns below


@dataclasses.dataclass(frozen=True)
class Lane:
    """One row of the drawing: a host thread or a device stream."""

    name: str  # "thread 1234", "GPU 0 stream 7"
    kind: Literal["host", "device"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timeline:
    """One step of a rank, downsampled (see the module's docstring).

    `step`: N of the ProfilerStep shown, None for the whole trace. `start_s`: the
    window's start on the trace's clock, s; `duration_s` its length. Each kept event
    has a lane (index into `lanes`), a start relative to `start_s` and a duration, s,
    a name and a category; they are sorted by lane, then start. `events_in_window`
    counts the lanes' events in the window before cutting and merging.
    """

    step: int | None
    start_s: float
    duration_s: float
    lanes: tuple[Lane, ...]
    lane: IntArray
    event_start_s: FloatArray
    event_duration_s: FloatArray
    name: tuple[str, ...]
    category: tuple[Category, ...]
    events_in_window: int

    @property
    def events_kept(self) -> int:
        """Events drawn, merged blocks counted once."""
        return len(self.lane)


def representative_step(windows: Sequence[StepWindow], number: int | None = None) -> int | None:
    """The index of the step a timeline shows: ProfilerStep#`number` when the trace has
    it, else the one the module's docstring describes; None: the trace has no steps."""
    if not windows:
        return None
    named = [i for i, w in enumerate(windows) if number is not None and w.number == number]
    if named:
        return named[0]
    candidates = list(range(1, len(windows) - 1)) if len(windows) >= 3 else [0]
    ordered = sorted(candidates, key=lambda i: (windows[i].duration_us, windows[i].start_us))
    return ordered[(len(ordered) - 1) // 2]


def common_step(traces_windows: Sequence[Sequence[StepWindow]]) -> int | None:
    """The ProfilerStep number every rank's timeline shows, so ranks are drawn side by
    side at one step: the first rank's representative among the steps all ranks
    recorded; None when they share none (each rank then shows its own)."""
    if not traces_windows:
        return None
    shared = set.intersection(*({w.number for w in ws} for ws in traces_windows)) - {None}
    first = [w for w in traces_windows[0] if w.number in shared]
    chosen = representative_step(first)
    return None if chosen is None else first[chosen].number


def step_timeline(
    ctx: TraceContext,
    windows: Sequence[StepWindow],
    device_spans: Sequence[tuple[float, float] | None],
    number: int | None = None,
) -> Timeline | None:
    """The timeline of ProfilerStep#`number` when the trace has it, else of its
    representative step (`windows` in time order, each with its span on the device,
    µs); None when the trace has no events at all."""
    trace = ctx.trace
    if not any(len(t) for t in trace.tables.values()):
        return None
    chosen = representative_step(windows, number)
    window = whole_window(trace) if chosen is None else windows[chosen]
    lo, hi = window.start_us, window.end_us
    span = None if chosen is None else device_spans[chosen]
    if span is not None:
        lo, hi = min(lo, span[0]), max(hi, span[1])
    host, host_keys, host_events = _host_blocks(ctx, lo, hi)
    device, device_keys = _device_blocks(ctx, lo, hi)
    return drawn(
        Blocks.join([host, device]),
        np.r_[host_keys, device_keys],
        lo,
        hi,
        step=window.number,
        names=trace.names,
        lane_of=_lane,
        events_in_window=host_events + len(device),
    )


def drawn(
    blocks: Blocks,
    keys: IntArray,
    lo: float,
    hi: float,
    *,
    step: int | None,
    names: Sequence[str],
    lane_of: Callable[..., Lane],
    events_in_window: int,
) -> Timeline:
    """`blocks` (each with its lane's key, a row of `keys` whose first column is 0 for a
    host thread and 1 for a device stream) drawn as the window [lo, hi] µs of step
    `step`: lanes in key order, short runs merged and capped (`downsample`), names from
    `names` by id, times rounded to the ns. `lane_of(*key)` makes a key's Lane."""
    keys, lane = group(keys)
    blocks = downsample(
        dataclasses.replace(blocks, lane=lane),
        lo,
        hi,
        short_us=(hi - lo) / RESOLUTION,
        max_events=MAX_EVENTS,
        merged_category=_CODE[Category.MERGED],
        kept_category=_CODE[Category.COLLECTIVE],
    )
    # Rounded to the ns on both ends, so that an event that begins as the one before
    # it ends does so in the rounded times too.
    start_s = np.round((blocks.start_us - lo) * US, 9)
    end_s = np.round((blocks.end_us - lo) * US, 9)
    return Timeline(
        step=step,
        start_s=lo * US,
        duration_s=round((hi - lo) * US, 9),
        lanes=tuple(lane_of(*key) for key in keys.tolist()),
        lane=blocks.lane,
        event_start_s=start_s,
        event_duration_s=np.round(end_s - start_s, 9),
        name=tuple(
            names[n] if n >= 0 else f"{c} events"
            for n, c in zip(blocks.name.tolist(), blocks.count.tolist(), strict=True)
        ),
        category=tuple(CATEGORIES[c] for c in blocks.category.tolist()),
        events_in_window=events_in_window,
    )


_CODE = {c: CATEGORIES.index(c) for c in Category}


def _lane(kind: int, device: int, thread: int) -> Lane:
    if kind == 0:
        return Lane(f"thread {thread}", "host")
    return Lane(f"GPU {device} stream {thread}", "device")


def _keys(kind: int, device: IntArray | int, thread: IntArray) -> IntArray:
    """Lane keys (kind, device, thread or stream), one row per event."""
    return np.c_[np.full(len(thread), kind), np.broadcast_to(device, thread.shape), thread]


def _overlapping(table: EventTable, lo: float, hi: float) -> BoolArray:
    """Which events have time in [lo, hi], or, lasting none, lie in it."""
    start, end = table.ts_us, table.end_us
    return ((start < hi) & (end > lo)) | ((start == end) & (start >= lo) & (start <= hi))


def _host_blocks(ctx: TraceContext, lo: float, hi: float) -> tuple[Blocks, IntArray, int]:
    """Top-level CPU ops and host collectives cut around the outermost host syncs,
    thread by thread; their lane keys; and how many events that drew on."""
    trace = ctx.trace
    index = ctx.once(shared_host_index)
    sync, collective = index.sync, index.collective  # by name id
    marks = trace.table(Kind.ANNOTATION)
    marks = marks.rows(np.flatnonzero(_overlapping(marks, lo, hi) & collective[marks.name]))
    ops = trace.table(Kind.CPU_OP)
    ops = _concat(ops.rows(np.flatnonzero(_overlapping(ops, lo, hi))), marks)
    names = np.unique(ops.name)
    step = np.zeros(len(trace.names), dtype=bool)  # ProfilerStep#N, where it is an op
    step[names] = [profiler_step(trace.names[n]) is not None for n in names.tolist()]
    ops = ops.rows(np.flatnonzero(~step[ops.name]))
    runtime = trace.table(Kind.RUNTIME)
    calls = runtime.rows(np.flatnonzero(_overlapping(runtime, lo, hi) & sync[runtime.name]))
    waited = index.sync_ops.rows(np.flatnonzero(_overlapping(index.sync_ops, lo, hi)))
    syncs = _concat(waited, calls)
    outer = np.flatnonzero(top_level(syncs))
    syncs = syncs.rows(outer[np.argsort(syncs.ts_us[outer], kind="stable")])  # in time order
    work = ops.rows(np.flatnonzero(top_level(ops) & ~sync[ops.name]))
    parts, tids = [Blocks.of(syncs, _CODE[Category.SYNC])], [syncs.tid]
    for tid in np.unique(work.tid).tolist():
        mine = work.rows(np.flatnonzero(work.tid == tid))
        waits = syncs.rows(np.flatnonzero(syncs.tid == tid))
        parts.append(_cut(mine, waits.ts_us, waits.end_us))
        tids.append(np.full(len(parts[-1]), tid))
    blocks = Blocks.join(parts)
    blocks = dataclasses.replace(
        blocks,
        category=np.where(
            collective[blocks.name] & (blocks.category == _CODE[Category.CPU_OP]),
            _CODE[Category.COLLECTIVE],
            blocks.category,
        ),
    )
    return blocks, _keys(0, 0, np.concatenate(tids)), len(work) + len(syncs)


def _concat(a: EventTable, b: EventTable) -> EventTable:
    return EventTable(
        **{f.name: np.r_[getattr(a, f.name), getattr(b, f.name)] for f in dataclasses.fields(a)}
    )


def _cut(ops: EventTable, hole_start: FloatArray, hole_end: FloatArray) -> Blocks:
    """The parts of `ops` (disjoint) outside the holes (disjoint, in time order): each op meets
    the free intervals between holes from the first that ends after its start to the
    last that starts before its end."""
    free_start = np.r_[-np.inf, hole_end]
    free_end = np.r_[hole_start, np.inf]
    first = np.searchsorted(free_end, ops.ts_us, side="right")
    last = np.searchsorted(free_start, ops.end_us, side="left") - 1
    count = np.maximum(last - first + 1, 0)
    owner = np.repeat(np.arange(len(ops)), count)
    free = first[owner] + np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
    start = np.maximum(ops.ts_us[owner], free_start[free])
    end = np.minimum(ops.end_us[owner], free_end[free])
    instant = ops.dur_us[owner] == 0  # an op lasting no time, outside every hole
    keep = (end > start) | (instant & (end == start))
    parts = Blocks.of(ops.rows(owner[keep]), _CODE[Category.CPU_OP])
    return dataclasses.replace(parts, start_us=start[keep], end_us=end[keep])


def _device_blocks(ctx: TraceContext, lo: float, hi: float) -> tuple[Blocks, IntArray]:
    """Kernels, copies and sets with time in the window, and their streams' lane keys."""
    device = ctx.device
    rows = np.flatnonzero(ctx.work & _overlapping(device, lo, hi))
    kernel_rows = len(ctx.trace.table(Kind.KERNEL))  # `device` holds kernels first
    types = ctx.types[device.name[rows]]
    memory = (rows >= kernel_rows) | (types == KERNEL_TYPES.index(KernelType.MEMORY))
    category = np.where(
        types == KERNEL_TYPES.index(KernelType.COMMUNICATION),
        _CODE[Category.COLLECTIVE],
        np.where(memory, _CODE[Category.MEMORY], _CODE[Category.KERNEL]),
    )
    return Blocks.of(device.rows(rows), category), _keys(1, device.pid[rows], device.tid[rows])
