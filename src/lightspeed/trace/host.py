"""The host (CPU) side of one window of a trace: launches, synchronizations, data
loading, and how much of the window real work fills.

Launch statistics follow HolisticTraceAnalysis 0.5 (`cuda_kernel_launch_stats`):
launch delay = kernel start − end of its launch call (never below 0); a kernel is
shorter than its launch when its launch took at most 50 µs and the kernel less time
than that; launches over 50 µs and delays over 100 µs are outliers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from lightspeed.document import Unit, Value, line
from lightspeed.rules import SMALL_OP_S
from lightspeed.trace import intervals
from lightspeed.trace.events import US, EventTable, IntArray, Kind, Trace, seconds
from lightspeed.trace.names import (
    BoolArray,
    is_data_loading,
    is_host_collective,
    is_host_sync,
    is_launch,
    is_worker_data_loading,
    names_where,
)
from lightspeed.trace.packed import records
from lightspeed.trace.steps import (
    StepWindow,
    correlate,
    count_names,
    in_window,
    top_level,
)
from lightspeed.trace.window import (
    Fields,
    Shown,
    StepsContext,
    TraceContext,
    WindowAnalyzer,
    WindowContext,
)
from lightspeed.units import plural

RUNTIME_CUTOFF_US = 50.0
LAUNCH_DELAY_CUTOFF_US = 100.0
# A CPU op shorter than this spends its time on dispatch, not on its work; longer
# top-level ops are the window's work.
SMALL_OP_US = round(SMALL_OP_S / US, 6)  # 20 µs, exactly


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LaunchStats:
    """Kernel launches in the window (seconds; delays over launches matched to a kernel)."""

    launches: int = 0
    launch_cpu_s: float = 0.0  # total CPU time in launch calls
    matched: int = 0  # launches whose kernel is in the trace
    median_delay_s: float | None = None
    shorter_than_launch: int = 0
    runtime_outliers: int = 0
    delay_outliers: int = 0

    @property
    def cpu_per_launch_s(self) -> float | None:
        return self.launch_cpu_s / self.launches if self.launches else None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HostStats:
    """What the CPU did in the window.

    `window_s`: the step (its ProfilerStep's length, or the whole trace).
    `data_loading_s`: time in DataLoader iterations; `loader_workers` whether they
    came from a DataLoader with worker processes (None: no DataLoader iteration in the
    window). `sync_s` and `syncs`: time in and
    number of host synchronizations (device/stream/event synchronize, blocking copies,
    `aten::item`/`_local_scalar_dense`). `collective_s`: time in collectives as the
    host sees them (`names.is_host_collective`). `ops`: top-level CPU ops. `work_s`:
    time in top-level ops of at least 20 µs. Times are unions: nothing counts twice.

    With device events in the window (else None): `sync_while_idle_s` is the host's
    time in syncs while the device runs nothing; `sync_idle_gaps_s` the device's idle
    gaps that begin while the host is in a sync, each counted whole: the device ran
    dry while the host waited on it, and stayed idle until the host's next launch,
    since the host could not queue work ahead. `sync_lost_s` is what the syncs cost
    the device: those gaps, plus the time syncs spent on a device already idle.
    """

    window_s: float
    data_loading_s: float
    sync_s: float
    syncs: int
    ops: int
    work_s: float
    busy_s: float  # union of work, data loading, syncs and collectives
    collective_s: float = 0.0
    sync_calls: dict[str, int] = dataclasses.field(default_factory=dict)  # by name, nested too
    sync_while_idle_s: float | None = None
    sync_idle_gaps_s: float | None = None
    sync_lost_s: float | None = None
    loader_workers: bool | None = None

    @property
    def overhead_s(self) -> float:
        """The window's time in no op of 20 µs, no data loading, no sync and no
        collective: per-op dispatch cost of small ops and the Python between ops."""
        return max(0.0, self.window_s - self.busy_s)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostIndex:
    """What the host analyses ask of every event, worked out once per trace: which
    names launch work, synchronize or load data, and which CPU ops are top-level."""

    launch: BoolArray  # by name id
    sync: BoolArray
    loading: BoolArray
    worker_loading: BoolArray
    collective: BoolArray
    outer_ops: BoolArray  # by row of the CPU-op table
    # The CPU ops that are host syncs (`aten::item`, `_local_scalar_dense`) and did wait
    # on a device: what the analyses read as op-level syncs, beside the runtime's calls.
    sync_ops: EventTable


def host_index(trace: Trace) -> HostIndex:
    sync = names_where(trace, is_host_sync)
    ops = trace.table(Kind.CPU_OP)
    return HostIndex(
        launch=names_where(trace, is_launch),
        sync=sync,
        loading=names_where(trace, is_data_loading),
        worker_loading=names_where(trace, is_worker_data_loading),
        collective=names_where(trace, is_host_collective),
        outer_ops=top_level(ops),
        sync_ops=ops.rows(
            blocking_sync_ops(ops, trace.table(Kind.RUNTIME), sync, bool(trace.devices))
        ),
    )


def blocking_sync_ops(
    ops: EventTable, runtime: EventTable, sync: BoolArray, has_device: bool
) -> IntArray:
    """Rows, ascending, of the CPU ops named as host syncs that made a runtime call on
    their thread while they ran: reading a GPU tensor's value copies it and waits for
    the stream, reading a CPU tensor's (an optimizer's step count) calls nothing and
    waits for nothing. A trace without runtime calls has nothing to tell them apart by:
    every such op is kept where the trace names a device (`deviceProperties`: a GPU
    run profiled without its CUDA activity), none where it names none (a CPU's run,
    with no device to wait for)."""
    rows = np.flatnonzero(sync[ops.name])
    if len(rows) == 0:
        return rows
    if len(runtime) == 0:
        return rows if has_device else rows[:0]
    # One sorted key per (thread, time): the runtime calls of a thread are contiguous.
    _, codes = np.unique(np.concatenate([runtime.tid, ops.tid[rows]]), return_inverse=True)
    t0 = min(float(runtime.ts_us.min()), float(ops.ts_us[rows].min()))
    span = max(float(runtime.end_us.max()), float(ops.end_us[rows].max())) - t0 + 1.0
    call_key = codes[: len(runtime)] * span + (runtime.ts_us - t0)
    order = np.sort(call_key)
    op_code = codes[len(runtime) :]
    first = np.searchsorted(order, op_code * span + (ops.ts_us[rows] - t0), side="left")
    ends = op_code * span + (ops.end_us[rows] - t0)
    inside = first < len(order)
    inside[inside] = order[first[inside]] <= ends[inside]
    return rows[inside]


def launch_stats(
    trace: Trace, index: HostIndex, window: StepWindow, device: EventTable
) -> LaunchStats:
    """HTA's launch statistics for launch calls that start in `window`."""
    runtime = trace.table(Kind.RUNTIME)
    rows = in_window(runtime, window)
    rows = rows[index.launch[runtime.name[rows]]]
    if len(rows) == 0:
        return LaunchStats()
    cpu_us = runtime.dur_us[rows]
    matched, dev_rows = correlate(runtime.correlation[rows], device)
    launch_end = runtime.ts_us[rows][matched] + cpu_us[matched]
    delay = np.maximum(0.0, device.ts_us[dev_rows[matched]] - launch_end)
    gpu_us = device.dur_us[dev_rows[matched]]
    cpu_matched = cpu_us[matched]
    return LaunchStats(
        launches=len(rows),
        launch_cpu_s=float(cpu_us.sum()) * US,
        matched=int(matched.sum()),
        median_delay_s=float(np.median(delay)) * US if len(delay) else None,
        shorter_than_launch=int(
            np.sum((cpu_matched <= RUNTIME_CUTOFF_US) & (gpu_us < cpu_matched))
        ),
        runtime_outliers=int(np.sum(cpu_us > RUNTIME_CUTOFF_US)),
        delay_outliers=int(np.sum(delay > LAUNCH_DELAY_CUTOFF_US)),
    )


def host_stats(
    trace: Trace,
    index: HostIndex,
    window: StepWindow,
    device_busy: _Spans | None = None,
) -> HostStats:
    """The host side of `window` (see HostStats); `device_busy` is the union of all the
    trace's device events (µs), None when the window has none of its own. All of them:
    a sync early in a step often waits on the kernels of the step before."""
    lo, hi = window.start_us, window.end_us
    ops = _Overlapping(trace.table(Kind.CPU_OP), lo, hi)
    notes = _Overlapping(trace.table(Kind.ANNOTATION), lo, hi)
    runtime = _Overlapping(trace.table(Kind.RUNTIME), lo, hi)
    loading = intervals.join(notes.spans(index.loading), ops.spans(index.loading))
    worker_loading = intervals.join(
        notes.spans(index.worker_loading), ops.spans(index.worker_loading)
    )
    sync_ops = _Overlapping(index.sync_ops, lo, hi)
    syncs = intervals.join(runtime.spans(index.sync), sync_ops.spans(index.sync))
    sync_union = intervals.union(*syncs)
    in_it = [t.name[in_window(t, window)] for t in (runtime.table, index.sync_ops)]
    sync_names = np.concatenate([names[index.sync[names]] for names in in_it])
    collectives = intervals.join(notes.spans(index.collective), ops.spans(index.collective))
    ops_table = ops.table
    outer = in_window(ops_table, window)
    outer = outer[index.outer_ops[outer]]
    big = outer[ops_table.dur_us[outer] >= SMALL_OP_US]
    work = intervals.clip(ops_table.ts_us[big], ops_table.end_us[big], lo, hi)
    everything = intervals.join(work, loading, syncs, collectives)
    return HostStats(
        window_s=(hi - lo) * US,
        data_loading_s=intervals.length(*loading) * US,
        sync_s=float(np.sum(sync_union[1] - sync_union[0])) * US,
        syncs=len(sync_union[0]),
        ops=len(outer),
        work_s=intervals.length(*work) * US,
        busy_s=intervals.length(*everything) * US,
        collective_s=intervals.length(*collectives) * US,
        sync_calls=count_names(trace, sync_names),
        loader_workers=len(worker_loading[0]) > 0 if len(loading[0]) else None,
        **_sync_idle(sync_union, device_busy, lo, hi),
    )


def launch_stats_steps(
    trace: Trace, index: HostIndex, steps: intervals.Windows, device: EventTable
) -> list[LaunchStats]:
    """`launch_stats` of each of `steps`, computed over all their launches at once."""
    n = len(steps)
    runtime = trace.table(Kind.RUNTIME)
    starting = runtime.starting_in(*steps.extent)
    launch_rows = starting[index.launch[runtime.name[starting]]]
    which, step = steps.starting(runtime.ts_us[launch_rows])
    rows = launch_rows[which]
    cpu_us = runtime.dur_us[rows]
    matched, dev_rows = correlate(runtime.correlation[rows], device)
    m_step = step[matched]
    launch_end = runtime.ts_us[rows][matched] + cpu_us[matched]
    delay = np.maximum(0.0, device.ts_us[dev_rows[matched]] - launch_end)
    gpu_us = device.dur_us[dev_rows[matched]]
    cpu_matched = cpu_us[matched]
    launches = steps.counts(step)
    cpu_total = np.bincount(step, weights=cpu_us, minlength=n)
    n_matched = steps.counts(m_step)
    n_shorter = steps.counts(m_step[(cpu_matched <= RUNTIME_CUTOFF_US) & (gpu_us < cpu_matched)])
    runtime_outliers = steps.counts(step[cpu_us > RUNTIME_CUTOFF_US])
    delay_outliers = steps.counts(m_step[delay > LAUNCH_DELAY_CUTOFF_US])
    # Each step's median delay: its delays sorted, the middle one (or two's mean).
    sorted_delay = delay[np.lexsort((delay, m_step))]
    offset = np.cumsum(n_matched) - n_matched
    mid = offset + n_matched // 2
    if len(sorted_delay):
        upper = sorted_delay[np.minimum(mid, len(sorted_delay) - 1)]
        lower = sorted_delay[np.clip(mid - 1, 0, len(sorted_delay) - 1)]
        median = np.where(n_matched % 2, upper, (lower + upper) / 2) * US
    else:
        median = np.zeros(n)
    columns: dict[str, list[Any]] = {
        "launches": launches.tolist(),
        "launch_cpu_s": (cpu_total * US).tolist(),
        "matched": n_matched.tolist(),
        # None where no launch was matched to a kernel
        "median_delay_s": [
            m if c else None for m, c in zip(median.tolist(), n_matched.tolist(), strict=True)
        ],
        "shorter_than_launch": n_shorter.tolist(),
        "runtime_outliers": runtime_outliers.tolist(),
        "delay_outliers": delay_outliers.tolist(),
    }
    found: list[LaunchStats] = records(LaunchStats, columns, n)
    return found


def host_stats_steps(
    trace: Trace,
    index: HostIndex,
    steps: intervals.Windows,
    device_busy: _Spans,
    has_device: Sequence[bool],
) -> list[HostStats]:
    """`host_stats` of each of `steps`, computed over all their events at once: as
    `host_stats(…, device_busy)` for those that `has_device` events of their own, as
    `host_stats(…, None)` for the others."""

    ops, notes = trace.table(Kind.CPU_OP), trace.table(Kind.ANNOTATION)
    runtime = trace.table(Kind.RUNTIME)
    extent = steps.extent
    loading = steps.spread(*named_spans(index.loading, notes, ops, extent=extent))
    worker_loading = steps.spread(*named_spans(index.worker_loading, notes, ops, extent=extent))
    collectives = steps.spread(*named_spans(index.collective, notes, ops, extent=extent))
    syncs = steps.spread(
        *intervals.union(
            *named_spans(index.sync, runtime, index.sync_ops, extent=extent, lasting=True)
        )
    )
    # Top-level ops belong to the step they start in, and are cut to it.
    starting = ops.starting_in(*extent)
    outer = starting[index.outer_ops[starting]]
    which, op_step = steps.starting(ops.ts_us[outer])
    big = ops.dur_us[outer[which]] >= SMALL_OP_US
    rows, big_step = outer[which][big], op_step[big]
    w_s = np.maximum(ops.ts_us[rows], steps.lo[big_step])
    w_e = np.minimum(ops.end_us[rows], steps.hi[big_step])
    keep = w_e > w_s
    work = (big_step[keep], w_s[keep], w_e[keep])
    work_us = steps.lengths(steps.union(work))
    busy_us = steps.lengths(steps.union(intervals.join_parts(work, loading, syncs, collectives)))
    loading_us = steps.lengths(steps.union(loading))
    collective_us = steps.lengths(steps.union(collectives))
    n_loading, n_worker = steps.counts(loading[0]), steps.counts(worker_loading[0])
    n_syncs, sync_us = steps.counts(syncs[0]), steps.lengths(syncs)
    n_ops = steps.counts(op_step)
    sync_calls = _names_by_step(trace, steps, index.sync, runtime, index.sync_ops)
    idle_us = _sync_idle_steps(syncs, device_busy, steps) if len(device_busy[0]) else None
    n = len(has_device)

    columns: dict[str, list[Any]] = {
        "window_s": seconds(steps.hi - steps.lo),
        "data_loading_s": seconds(loading_us),
        "sync_s": seconds(sync_us),
        "syncs": np.asarray(n_syncs, dtype=np.int64).tolist(),
        "ops": np.asarray(n_ops, dtype=np.int64).tolist(),
        "work_s": seconds(work_us),
        "busy_s": seconds(busy_us),
        "collective_s": seconds(collective_us),
        "sync_calls": [sync_calls.get(k, {}) for k in range(n)],
        "loader_workers": [
            bool(w) if loading else None
            for w, loading in zip(n_worker.tolist(), n_loading.tolist(), strict=True)
        ],
    }
    if idle_us is not None:
        # The device's idle figures of the steps that have device events; the others
        # keep the field's default.
        defaults = {f.name: f.default for f in dataclasses.fields(HostStats)}
        for key, figures in idle_us.items():
            columns[key] = [
                x if device else defaults[key]
                for x, device in zip(seconds(figures), has_device, strict=True)
            ]
    found: list[HostStats] = records(HostStats, columns, n)
    return found


def _sync_idle_steps(
    syncs: intervals.Parts, busy: _Spans, steps: intervals.Windows
) -> dict[str, np.ndarray]:
    """`_sync_idle` of each of `steps` (µs), its syncs' parts `syncs` (by step, then
    start), against the union of all the device's work `busy`."""
    # The device's idle gaps in each step: what `busy` leaves of it.
    gap_w, gap_s, gap_e = steps.spread(*intervals.outside(intervals.within(busy, *steps.extent)))
    sync_w, sync_s, sync_e = syncs
    # The sync holding each gap's start: the last of its step's syncs starting at or
    # before it. Syncs and gaps in one order, by step, start, syncs first at a tie.
    n_syncs = len(sync_s)
    step = np.concatenate([sync_w, gap_w])
    start = np.concatenate([sync_s, gap_s])
    is_gap = np.concatenate([np.zeros(n_syncs, dtype=bool), np.ones(len(gap_s), dtype=bool)])
    order = np.lexsort((is_gap, start, step))
    latest = np.maximum.accumulate(np.where(is_gap[order], -1, order))
    holder = np.empty(len(gap_s), dtype=np.int64)
    holder[order[is_gap[order]] - n_syncs] = latest[is_gap[order]]
    held = holder >= 0
    held[held] = sync_w[holder[held]] == gap_w[held]
    # A gap cut by the step's start did not begin there.
    drained = held & (gap_s > steps.lo[gap_w])
    drained[drained] = gap_s[drained] <= sync_e[holder[drained]]
    gaps: intervals.Parts = (gap_w, gap_s, gap_e)

    def chosen(mask: np.ndarray) -> intervals.Parts:
        return gap_w[mask], gap_s[mask], gap_e[mask]

    gaps_us = steps.lengths(chosen(drained))
    return {
        "sync_while_idle_s": steps.overlap(syncs, gaps),
        "sync_idle_gaps_s": gaps_us,
        "sync_lost_s": gaps_us + steps.overlap(syncs, chosen(~drained)),
    }


def named_spans(
    mask: BoolArray,
    *tables: EventTable,
    extent: tuple[float, float] | None = None,
    lasting: bool = False,
) -> _Spans:
    """The times (µs) of the events of `tables`, in that order, whose name is in `mask`:
    with `extent`, only those with time in it; with `lasting`, only those that last some
    time (the only ones a window's `clip` keeps)."""
    starts, ends = [], []
    for t in tables:
        rows = t.overlapping(*extent) if extent is not None else np.arange(len(t))
        rows = rows[mask[t.name[rows]]]
        if lasting:
            rows = rows[t.end_us[rows] > t.ts_us[rows]]
        starts.append(t.ts_us[rows])
        ends.append(t.end_us[rows])
    return np.concatenate(starts), np.concatenate(ends)


def _names_by_step(
    trace: Trace, steps: intervals.Windows, mask: BoolArray, *tables: EventTable
) -> dict[int, dict[str, int]]:
    """For each step that has any, `count_names` of the events of `tables` (in that
    order, each in its rows' order) whose name is in `mask` and that start in it."""
    names, in_step = [], []
    for t in tables:
        rows = t.starting_in(*steps.extent)  # ascending
        rows = rows[mask[t.name[rows]]]
        which, step = steps.starting(t.ts_us[rows])
        order = np.argsort(which, kind="stable")  # rows' order within a step
        names.append(t.name[rows[which[order]]])
        in_step.append(step[order])
    name, step = np.concatenate(names), np.concatenate(in_step)
    # Each (step, name) once, with its count, in the order first seen in its step.
    pair = step * len(trace.names) + name
    _ids, first, times = np.unique(pair, return_index=True, return_counts=True)
    order = np.lexsort((first, step[first]))
    found: dict[int, dict[str, int]] = {}
    for i in order:
        found.setdefault(int(step[first[i]]), {})[trace.names[name[first[i]]]] = int(times[i])
    return found


def _sync_idle(syncs: _Spans, busy: _Spans | None, lo: float, hi: float) -> dict[str, float]:
    """The sync figures of HostStats against the device; {} without device events."""
    if busy is None or len(busy[0]) == 0:
        return {}
    gap_s, gap_e = intervals.gaps(*intervals.within(busy, lo, hi), lo, hi)
    sync_s, sync_e = syncs
    # The sync holding each gap's start, if any: the last one starting at or before it
    # (a sync that returns just as the device drains counts: it waited for that work).
    # A gap cut by the window's start did not begin there.
    holder = np.searchsorted(sync_s, gap_s, side="right") - 1
    drained = (holder >= 0) & (gap_s > lo)
    drained[drained] = gap_s[drained] <= sync_e[holder[drained]]
    gaps_us = float(np.sum(gap_e[drained] - gap_s[drained]))
    on_idle_us = intervals.overlap(syncs, (gap_s[~drained], gap_e[~drained]))
    return {
        "sync_while_idle_s": intervals.overlap(syncs, (gap_s, gap_e)) * US,
        "sync_idle_gaps_s": gaps_us * US,
        "sync_lost_s": (gaps_us + on_idle_us) * US,
    }


_Spans = intervals.Spans


class _Overlapping:
    """The events of `table` with time in (lo, hi), found once for every set of names a
    window's host analysis asks of them."""

    def __init__(self, table: EventTable, lo: float, hi: float) -> None:
        self.table, self.lo, self.hi = table, lo, hi
        self.rows = table.overlapping(lo, hi)
        self.names = table.name[self.rows]

    def spans(self, name_mask: BoolArray) -> _Spans:
        """The parts inside (lo, hi) of those events whose name is in `name_mask`."""
        rows = self.rows[name_mask[self.names]]
        return intervals.clip(self.table.ts_us[rows], self.table.end_us[rows], self.lo, self.hi)


def _device_syncs(w: WindowContext) -> dict[str, int]:
    """The device's own sync records (`cuda_sync`) in the window, by name."""
    trace = w.trace.trace
    syncs = trace.table(Kind.SYNC)
    return count_names(trace, syncs.name[in_window(syncs, w.window)])


def _device_syncs_steps(sc: StepsContext) -> list[dict[str, int]]:
    trace = sc.trace.trace
    every = np.ones(len(trace.names), dtype=bool)
    found = _names_by_step(trace, sc.steps, every, trace.table(Kind.SYNC))
    return [found.get(k, {}) for k in range(len(sc))]


def shared_host_index(ctx: TraceContext) -> HostIndex:
    """The trace's HostIndex, built once per trace for every analysis that asks."""
    return host_index(ctx.trace)


def _launches(w: WindowContext) -> LaunchStats:
    return launch_stats(w.trace.trace, w.trace.once(shared_host_index), w.window, w.trace.device)


def _host(w: WindowContext) -> HostStats:
    busy = w.trace.busy if w.has_device_events else None
    return host_stats(w.trace.trace, w.trace.once(shared_host_index), w.window, busy)


def _launches_steps(sc: StepsContext) -> list[LaunchStats]:
    ctx = sc.trace
    return launch_stats_steps(ctx.trace, ctx.once(shared_host_index), sc.steps, ctx.device)


def _host_steps(sc: StepsContext) -> list[HostStats]:
    ctx = sc.trace
    has_device = [w.has_device_events for w in sc.windows]
    return host_stats_steps(ctx.trace, ctx.once(shared_host_index), sc.steps, ctx.busy, has_device)


def _describe_launches(launches: LaunchStats) -> Shown:
    if not launches.launches:
        return ()
    return [
        (
            "launches",
            line(
                f"{launches.launches}, ",
                Value(launches.cpu_per_launch_s or 0, Unit.SECONDS),
                " CPU each, median delay ",
                Value(launches.median_delay_s or 0, Unit.SECONDS),
                f", {launches.shorter_than_launch} kernels shorter than their launch",
            ),
        )
    ]


def _describe_host(h: HostStats) -> Shown:
    rows: list[tuple[str, tuple[str | Value, ...]]] = [
        (
            "host",
            line(
                f"{h.ops} ops, data loading ",
                Value(h.data_loading_s, Unit.SECONDS),
                f", {plural(h.syncs, 'sync')} (",
                Value(h.sync_s, Unit.SECONDS),
                "), overhead ",
                Value(h.overhead_s, Unit.SECONDS),
            ),
        )
    ]
    if h.syncs and h.sync_while_idle_s is not None and h.sync_idle_gaps_s is not None:
        rows.append(
            (
                "syncs",
                line(
                    Value(h.sync_while_idle_s, Unit.SECONDS),
                    " of the host's sync time with the device idle; ",
                    Value(h.sync_idle_gaps_s, Unit.SECONDS),
                    " of device idle in gaps that began while the host waited in a sync",
                ),
            )
        )
    if h.sync_calls:
        calls = ", ".join(f"{n} ×{c}" for n, c in h.sync_calls.items())
        rows.append(("sync calls", line(calls)))
    return rows


def _describe_device_syncs(syncs: dict[str, int]) -> Shown:
    if not syncs:
        return ()
    return [("device syncs", line(", ".join(f"{n} ×{c}" for n, c in syncs.items())))]


LAUNCHES = WindowAnalyzer(
    key="launches",
    analyse=_launches,
    analyse_steps=_launches_steps,
    data=Fields((("cpu_per_launch_s", "cpu_per_launch_s"),)),
    describe=_describe_launches,
)
HOST = WindowAnalyzer(
    key="host",
    analyse=_host,
    analyse_steps=_host_steps,
    data=Fields((("overhead_s", "overhead_s"),)),
    describe=_describe_host,
)
DEVICE_SYNCS = WindowAnalyzer(
    key="device_syncs",
    analyse=_device_syncs,
    data=dict,
    describe=_describe_device_syncs,
    analyse_steps=_device_syncs_steps,
)
