"""Where a device's time goes in one window of a trace: temporal and idle breakdowns,
kernels by type and name, and communication/computation overlap.

Definitions follow HolisticTraceAnalysis 0.5 so figures can be cross-checked with it:

- temporal breakdown: over [first device event start, last end] (`total_s`), `idle_s`
  is the time no device event runs; `compute_s` the union of computation kernels;
  communication, memory and other are the time covered by those types and by no
  type before them (so the five parts sum to `total_s`; HTA's `non_compute_time` is
  communication + memory + other). A part is never negative: HTA's rounding to whole µs
  makes an event under 1 µs end before it starts, which HTA counts as less than no
  time; its type then covers none, and the parts exceed `total_s` by that much.
- idle breakdown, per stream (exactly HTA's): each gap before a kernel on a stream is
  host wait when the kernel's launch began after the previous kernel ended, else
  kernel wait when shorter than 30 µs, else other. For the device as a whole the same
  rule is applied to the gaps of the merged timeline, so its parts sum to `idle_s`.
- overlap: |communication ∩ computation| / |communication|.

Memory copies and sets count as device events; `cuda_sync` records do not (they mark
waiting, not work; HTA 0.5 likewise leaves them out of its idle breakdown).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from lightspeed.document import Column, Table, Unit, Value, line
from lightspeed.trace import intervals
from lightspeed.trace.events import US, FloatArray, IntArray, seconds
from lightspeed.trace.names import KERNEL_TYPES, BoolArray, KernelType, short_kernel_name
from lightspeed.trace.packed import records
from lightspeed.trace.window import (
    DeviceEvents,
    Fields,
    Shown,
    StepsContext,
    WindowAnalyzer,
    WindowContext,
    plain,
)

# HTA's consecutive_kernel_delay: a shorter gap between kernels is the device itself.
KERNEL_WAIT_US = 30.0
R = TypeVar("R")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TemporalBreakdown:
    """Seconds of the device window by what ran; the parts sum to `total_s`."""

    compute_s: float = 0.0
    communication_s: float = 0.0
    memory_s: float = 0.0
    other_s: float = 0.0
    idle_s: float = 0.0
    total_s: float = 0.0

    @property
    def busy_s(self) -> float:
        return self.total_s - self.idle_s

    @property
    def idle_fraction(self) -> float:
        return self.idle_s / self.total_s if self.total_s else 0.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IdleBreakdown:
    """Seconds of device idle time by cause."""

    host_wait_s: float = 0.0
    kernel_wait_s: float = 0.0
    other_s: float = 0.0

    @property
    def idle_s(self) -> float:
        return self.host_wait_s + self.kernel_wait_s + self.other_s


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StreamIdle:
    """HTA's per-stream idle breakdown of one stream (`device` is the trace's pid)."""

    device: int
    stream: int
    idle: IdleBreakdown


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KernelStat:
    """One kernel name's totals in the window."""

    name: str
    type: KernelType
    count: int
    total_s: float
    mean_s: float
    max_s: float


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Overlap:
    """Communication time and how much of it computation hides.

    `fraction` is None when there is no communication (HTA reports NaN)."""

    communication_s: float = 0.0
    overlapped_s: float = 0.0

    @property
    def fraction(self) -> float | None:
        return self.overlapped_s / self.communication_s if self.communication_s else None

    @property
    def exposed_s(self) -> float:
        return self.communication_s - self.overlapped_s


def temporal_breakdown(ev: DeviceEvents) -> TemporalBreakdown:
    """The temporal breakdown of the window's device events (see the module docstring)."""
    if len(ev.start_us) == 0:
        return TemporalBreakdown()
    total = float(ev.end_us.max() - ev.start_us.min())
    covered = 0.0
    parts: dict[KernelType, float] = {}
    starts: list[FloatArray] = []
    ends: list[FloatArray] = []
    for kernel_type in KERNEL_TYPES:
        s, e = ev.of_type(kernel_type)
        starts.append(s)
        ends.append(e)
        now = intervals.length(np.concatenate(starts), np.concatenate(ends))
        # Never below zero: an event that HTA's rounding made end before it starts
        # lowers the union it joins (HTA counts it, and `idle_s` stays HTA's), but no
        # kind of work runs for less than no time.
        parts[kernel_type] = max(0.0, now - covered)
        covered = now
    return TemporalBreakdown(
        compute_s=parts[KernelType.COMPUTATION] * US,
        communication_s=parts[KernelType.COMMUNICATION] * US,
        memory_s=parts[KernelType.MEMORY] * US,
        other_s=parts[KernelType.OTHER] * US,
        idle_s=(total - covered) * US,
        total_s=total * US,
    )


def _classify(gap_us: FloatArray, gap_start_us: FloatArray, launch_us: FloatArray) -> IdleBreakdown:
    # A NaN launch compares False: never host wait, as in HTA.
    host = launch_us > gap_start_us
    kernel = ~host & (gap_us < KERNEL_WAIT_US)
    other = ~host & ~kernel
    return IdleBreakdown(
        host_wait_s=float(gap_us[host].sum()) * US,
        kernel_wait_s=float(gap_us[kernel].sum()) * US,
        other_s=float(gap_us[other].sum()) * US,
    )


def idle_breakdown(ev: DeviceEvents) -> IdleBreakdown:
    """The device's idle time (gaps of the merged timeline) by cause: the event that
    ends each gap decides it."""
    if len(ev.start_us) == 0:
        return IdleBreakdown()
    u_start, u_end = intervals.union(ev.start_us, ev.end_us)
    gap_start, gap_end = u_end[:-1], u_start[1:]
    return _classify(gap_end - gap_start, gap_start, ending_launch_us(ev, gap_end))


def ending_launch_us(ev: DeviceEvents, gap_end_us: FloatArray) -> FloatArray:
    """For gaps of the device's timeline that end at `gap_end_us`, where device events
    start, the launch of the event that ends each (NaN: unknown): the event that ends
    a gap starts exactly there; of several, the earliest launched decides (HTA's rule:
    the gap waited for the host when that launch began after the gap did)."""
    order = np.lexsort((ev.launch_us, ev.start_us))
    starts = ev.start_us[order]
    first = np.minimum(np.searchsorted(starts, gap_end_us, side="left"), len(starts) - 1)
    # A gap that another step's work ends (or none of these events) has no launch here.
    launch: FloatArray = np.where(starts[first] == gap_end_us, ev.launch_us[order][first], np.nan)
    return launch


def ending_launch_steps(
    ev: DeviceEvents, owner: IntArray, gap_step: IntArray, gap_end_us: FloatArray
) -> FloatArray:
    """`ending_launch_us` of many steps' gaps at once: `ev` holds the events of every
    step (`owner`: the step of each), each gap ends at `gap_end_us` in step `gap_step`."""
    n = len(ev.start_us)
    order = np.lexsort((ev.launch_us, ev.start_us, owner))
    # The events (by step, start, launch) and the gaps' ends in one order: by step, then
    # time, a gap's end before the events starting at it; each gap's end is followed by
    # the first event of its step starting there or later, if any.
    step = np.concatenate([owner[order], gap_step])
    time = np.concatenate([ev.start_us[order], gap_end_us])
    is_gap = np.concatenate([np.zeros(n, dtype=bool), np.ones(len(gap_end_us), dtype=bool)])
    merged = np.lexsort((~is_gap, time, step))
    later = np.where(is_gap[merged], n, merged)
    following = np.minimum.accumulate(later[::-1])[::-1]
    next_event = np.empty(len(gap_end_us), dtype=np.int64)
    next_event[merged[is_gap[merged]] - n] = following[is_gap[merged]]
    found = next_event < n
    event = order[np.minimum(next_event, max(n - 1, 0))] if n else next_event
    found[found] = (owner[event[found]] == gap_step[found]) & (
        ev.start_us[event[found]] == gap_end_us[found]
    )
    return np.where(found, ev.launch_us[event] if n else np.nan, np.nan)


def stream_idle(ev: DeviceEvents) -> list[StreamIdle]:
    """HTA's idle breakdown of each stream: gaps between consecutive kernels (by start)."""
    result = []
    keys = sorted(set(zip(ev.device.tolist(), ev.stream.tolist(), strict=True)))
    for device, stream in keys:
        on = (ev.device == device) & (ev.stream == stream)
        order = np.argsort(ev.start_us[on], kind="stable")
        start = ev.start_us[on][order]
        end = ev.end_us[on][order]
        launch = ev.launch_us[on][order]
        prev_end = end[:-1]
        idle = _classify(start[1:] - prev_end, prev_end, launch[1:])
        result.append(StreamIdle(device=device, stream=stream, idle=idle))
    return result


def kernel_stats(ev: DeviceEvents, names: tuple[str, ...], top: int) -> list[KernelStat]:
    """The `top` kernel names by total time, with count, mean and max."""
    if len(ev.name) == 0:
        return []
    dur = ev.end_us - ev.start_us
    ids, inverse = np.unique(ev.name, return_inverse=True)
    totals = np.bincount(inverse, weights=dur)
    counts = np.bincount(inverse)
    maxima = np.zeros(len(ids))
    np.maximum.at(maxima, inverse, dur)
    types = np.zeros(len(ids), dtype=np.int64)
    types[inverse] = ev.type
    best = np.argsort(-totals, kind="stable")[:top]
    return [_kernel_stat(names[ids[i]], types[i], counts[i], totals[i], maxima[i]) for i in best]


def _kernel_stat(
    name: str, type_index: int, count: int, total_us: float, max_us: float
) -> KernelStat:
    return KernelStat(
        name=name,
        type=KERNEL_TYPES[type_index],
        count=int(count),
        total_s=float(total_us) * US,
        mean_s=float(total_us / count) * US,
        max_s=float(max_us) * US,
    )


def type_totals(ev: DeviceEvents) -> dict[KernelType, float]:
    """Seconds of each kernel type: the sum of its events' durations."""
    dur = ev.end_us - ev.start_us
    return {t: float(dur[ev.type == i].sum()) * US for i, t in enumerate(KERNEL_TYPES)}


def comm_overlap(ev: DeviceEvents) -> Overlap:
    """Communication time and the part of it that overlaps computation."""
    comm = intervals.union(*ev.of_type(KernelType.COMMUNICATION))
    comp = intervals.union(*ev.of_type(KernelType.COMPUTATION))
    return Overlap(
        communication_s=float(np.sum(comm[1] - comm[0])) * US,
        overlapped_s=intervals.overlap(comm, comp) * US,
    )


# --- The same, for many steps of one trace at once (`WindowAnalyzer.analyse_steps`). --


def _each_step(
    sc: StepsContext, alone: Callable[[WindowContext], R], has: IntArray, found: list[R]
) -> list[R]:
    """Each step's result: `found[j]` for the step `has[j]`, `alone` for the others."""
    result: list[R | None] = [None] * len(sc)
    for j, k in enumerate(has):
        result[k] = found[j]
    return [alone(w) if r is None else r for w, r in zip(sc.windows, result, strict=True)]


def temporal_steps(sc: StepsContext) -> list[TemporalBreakdown] | None:
    """`temporal_breakdown` of each of many steps at once (None: their extents overlap)."""
    if sc.extents is None:
        return None
    has, steps = sc.extents
    ev = sc.events
    total = steps.hi - steps.lo
    covered = np.zeros(len(has))
    parts = {}
    for i, kernel_type in enumerate(KERNEL_TYPES):
        now = steps.lengths(steps.union(sc.parts(ev.type <= i, lasting=True)))
        parts[kernel_type] = np.maximum(0.0, now - covered)
        covered = now
    found = records(
        TemporalBreakdown,
        {
            "compute_s": seconds(parts[KernelType.COMPUTATION]),
            "communication_s": seconds(parts[KernelType.COMMUNICATION]),
            "memory_s": seconds(parts[KernelType.MEMORY]),
            "other_s": seconds(parts[KernelType.OTHER]),
            "idle_s": seconds(total - covered),
            "total_s": seconds(total),
        },
        len(has),
    )
    return _each_step(sc, lambda w: temporal_breakdown(w.events), has, found)


def _classified(
    steps: int, step: IntArray, gap_us: FloatArray, gap_start_us: FloatArray, launch_us: FloatArray
) -> list[IdleBreakdown]:
    """`_classify` of each of `steps` steps' gaps (`step`: the step of each)."""
    host = launch_us > gap_start_us
    kernel = ~host & (gap_us < KERNEL_WAIT_US)
    other = ~host & ~kernel

    def summed(rows: BoolArray) -> FloatArray:
        return np.asarray(
            np.bincount(step[rows], weights=gap_us[rows], minlength=steps), dtype=np.float64
        )

    columns = {
        "host_wait_s": seconds(summed(host)),
        "kernel_wait_s": seconds(summed(kernel)),
        "other_s": seconds(summed(other)),
    }
    found: list[IdleBreakdown] = records(IdleBreakdown, columns, steps)
    return found


def idle_steps(sc: StepsContext) -> list[IdleBreakdown] | None:
    """`idle_breakdown` of each of many steps at once (None: their extents overlap)."""
    if sc.extents is None:
        return None
    has, steps = sc.extents
    ev = sc.events
    step, u_start, u_end = steps.union(sc.parts(np.ones(len(ev.start_us), dtype=bool)))
    inner = np.flatnonzero(step[1:] == step[:-1])  # a gap between two merged intervals
    gap_step, gap_start, gap_end = step[inner], u_end[inner], u_start[inner + 1]
    launch = ending_launch_steps(ev, sc.owner, has[gap_step], gap_end)
    found = _classified(len(has), gap_step, gap_end - gap_start, gap_start, launch)
    return _each_step(sc, lambda w: idle_breakdown(w.events), has, found)


def overlap_steps(sc: StepsContext) -> list[Overlap] | None:
    """`comm_overlap` of each of many steps at once (None: their extents overlap)."""
    if sc.extents is None:
        return None
    has, steps = sc.extents
    ev = sc.events
    comm = steps.union(sc.parts(ev.type == KERNEL_TYPES.index(KernelType.COMMUNICATION)))
    comp = steps.union(sc.parts(ev.type == KERNEL_TYPES.index(KernelType.COMPUTATION)))
    comm_us = steps.lengths(comm)
    overlapped = steps.overlap(comm, comp)
    found = records(
        Overlap,
        {"communication_s": seconds(comm_us), "overlapped_s": seconds(overlapped)},
        len(has),
    )
    return _each_step(sc, lambda w: comm_overlap(w.events), has, found)


def stream_steps(sc: StepsContext) -> list[list[StreamIdle]]:
    """`stream_idle` of each of many steps at once."""
    ev, owner = sc.events, sc.owner
    order = np.lexsort((ev.start_us, ev.stream, ev.device, owner))
    step, device, stream = owner[order], ev.device[order], ev.stream[order]
    start, end, launch = ev.start_us[order], ev.end_us[order], ev.launch_us[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (step[1:] != step[:-1]) | (device[1:] != device[:-1]) | (stream[1:] != stream[:-1])
    group = np.cumsum(new) - 1
    firsts = np.flatnonzero(new)
    after = np.flatnonzero(~new)  # each event after the first of its stream
    idle = _classified(
        len(firsts), group[after], start[after] - end[after - 1], end[after - 1], launch[after]
    )
    columns = {"device": device[firsts].tolist(), "stream": stream[firsts].tolist(), "idle": idle}
    made: list[StreamIdle] = records(StreamIdle, columns, len(firsts))
    # Each step's streams: a run of them, in order (the steps are the first sort key).
    bounds = np.searchsorted(step[firsts], np.arange(len(sc.windows) + 1)).tolist()
    return [made[a:b] for a, b in itertools.pairwise(bounds)]


def type_totals_steps(sc: StepsContext) -> list[dict[KernelType, float]]:
    """`type_totals` of each of many steps at once."""
    ev, n, types = sc.events, len(sc), len(KERNEL_TYPES)
    totals = np.bincount(
        sc.owner * types + ev.type, weights=ev.end_us - ev.start_us, minlength=n * types
    ).reshape(n, types)
    return [{t: float(row[i]) * US for i, t in enumerate(KERNEL_TYPES)} for row in totals]


def kernel_stats_steps(sc: StepsContext, top: int) -> list[list[KernelStat]]:
    """`kernel_stats` of each of many steps at once."""
    ev, names = sc.events, sc.trace.trace.names
    dur = ev.end_us - ev.start_us
    keys, first, inverse = np.unique(
        sc.owner * len(names) + ev.name, return_index=True, return_inverse=True
    )
    totals = np.bincount(inverse, weights=dur)
    counts = np.bincount(inverse)
    maxima = np.zeros(len(keys))
    np.maximum.at(maxima, inverse, dur)
    step, name, types = sc.owner[first], ev.name[first], ev.type[first]
    # Each step's names by total time, longest first; ties by name id, as one step's do.
    order = np.lexsort((name, -totals, step))
    by_step = step[order]
    kept = order[np.arange(len(order)) - np.searchsorted(by_step, by_step) < top]
    made = records(
        KernelStat,
        {
            "name": [names[i] for i in name[kept].tolist()],
            "type": [KERNEL_TYPES[i] for i in types[kept].tolist()],
            "count": counts[kept].tolist(),
            "total_s": (totals[kept] * US).tolist(),
            "mean_s": (totals[kept] / counts[kept] * US).tolist(),
            "max_s": (maxima[kept] * US).tolist(),
        },
        len(kept),
    )
    bounds = np.searchsorted(step[kept], np.arange(len(sc) + 1)).tolist()
    return [made[a:b] for a, b in itertools.pairwise(bounds)]


# --- What the window analyses declare: their results in JSON and in reports. ---------

TOP_KERNELS = 10
_SHARES = ("compute", "communication", "memory", "other", "idle")


def _describe_temporal(t: TemporalBreakdown) -> Shown:
    if not t.total_s:
        return ()
    spans: list[str | Value] = []
    for i, (label, v) in enumerate(
        zip(_SHARES, (t.compute_s, t.communication_s, t.memory_s, t.other_s, t.idle_s), strict=True)
    ):
        spans += [", " if i else "", f"{label} ", Value(v / t.total_s, Unit.FRACTION)]
    return [("device time", line(*spans, " of ", Value(t.total_s, Unit.SECONDS)))]


def _describe_idle(idle: IdleBreakdown) -> Shown:
    if not idle.idle_s:
        return ()
    return [
        (
            "device idle",
            line(
                "waiting for the host ",
                Value(idle.host_wait_s, Unit.SECONDS),
                ", between back-to-back kernels ",
                Value(idle.kernel_wait_s, Unit.SECONDS),
                ", other ",
                Value(idle.other_s, Unit.SECONDS),
            ),
        )
    ]


def _describe_overlap(o: Overlap) -> Shown:
    if not o.communication_s:
        return ()
    return [
        (
            "communication",
            line(
                Value(o.communication_s, Unit.SECONDS),
                ", ",
                Value(o.fraction or 0, Unit.FRACTION),
                " overlapped with compute, ",
                Value(o.exposed_s, Unit.SECONDS),
                " exposed",
            ),
        )
    ]


def _describe_kernels(kernels: list[KernelStat]) -> Shown:
    if not kernels:
        return ()
    table = Table(
        title="Top kernels",
        columns=(
            Column("name", "kernel", shrink=True, abbreviate=short_kernel_name),
            Column("type", "type"),
            Column("count", "count", numeric=True),
            Column("total_s", "total", numeric=True),
            Column("mean_s", "mean", numeric=True),
        ),
        rows=tuple(
            (
                k.name,
                k.type.value,
                Value(k.count, Unit.INTEGER),
                Value(k.total_s, Unit.SECONDS),
                Value(k.mean_s, Unit.SECONDS),
            )
            for k in kernels
        ),
    )
    return [table]


TEMPORAL = WindowAnalyzer(
    key="temporal_breakdown",
    analyse=lambda w: temporal_breakdown(w.events),
    data=plain,
    describe=_describe_temporal,
    analyse_steps=temporal_steps,
)
IDLE = WindowAnalyzer(
    key="idle_breakdown",
    analyse=lambda w: idle_breakdown(w.events),
    analyse_steps=idle_steps,
    data=plain,
    describe=_describe_idle,
)
OVERLAP = WindowAnalyzer(
    key="communication",
    analyse=lambda w: comm_overlap(w.events),
    analyse_steps=overlap_steps,
    data=Fields((("overlap_fraction", "fraction"), ("exposed_s", "exposed_s"))),
    describe=_describe_overlap,
)
STREAMS = WindowAnalyzer(
    key="streams",
    analyse=lambda w: stream_idle(w.events),
    analyse_steps=stream_steps,
    data=lambda streams: [
        {"device": s.device, "stream": s.stream, **plain(s.idle)} for s in streams
    ],
)
KERNEL_TYPES_TIME = WindowAnalyzer(
    key="kernel_types",
    analyse=lambda w: type_totals(w.events),
    analyse_steps=type_totals_steps,
    data=lambda totals: {t.value: s for t, s in totals.items()},
)


def _kernels(w: WindowContext) -> list[KernelStat]:
    return kernel_stats(w.events, w.trace.trace.names, TOP_KERNELS)


KERNELS = WindowAnalyzer(
    key="kernels",
    analyse=_kernels,
    analyse_steps=lambda sc: kernel_stats_steps(sc, TOP_KERNELS),
    data=plain,  # orjson writes each KernelStat's type as the type's value
    describe=_describe_kernels,
)
