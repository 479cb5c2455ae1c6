"""The host (CPU) side of one window of a trace: launches, synchronizations, data
loading, and how much of the window real work fills.

Launch statistics follow HolisticTraceAnalysis 0.5 (`cuda_kernel_launch_stats`):
launch delay = kernel start − end of its launch call (never below 0); a kernel is
shorter than its launch when its launch took at most 50 µs and the kernel less time
than that; launches over 50 µs and delays over 100 µs are outliers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lightspeed.document import Unit, Value, line
from lightspeed.rules import SMALL_OP_S
from lightspeed.trace import intervals
from lightspeed.trace.events import US, EventTable, Kind, Trace
from lightspeed.trace.names import (
    BoolArray,
    is_data_loading,
    is_host_collective,
    is_host_sync,
    is_launch,
    is_worker_data_loading,
    names_where,
)
from lightspeed.trace.steps import (
    StepWindow,
    correlate,
    count_names,
    in_window,
    top_level,
)
from lightspeed.trace.window import Shown, TraceContext, WindowAnalyzer, WindowContext
from lightspeed.units import plural

RUNTIME_CUTOFF_US = 50.0
LAUNCH_DELAY_CUTOFF_US = 100.0
# A CPU op shorter than this spends its time on dispatch, not on its work; longer
# top-level ops are the window's work.
SMALL_OP_US = round(SMALL_OP_S / US, 6)  # 20 µs, exactly


@dataclasses.dataclass(frozen=True, kw_only=True)
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


@dataclasses.dataclass(frozen=True, kw_only=True)
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


def host_index(trace: Trace) -> HostIndex:
    return HostIndex(
        launch=names_where(trace, is_launch),
        sync=names_where(trace, is_host_sync),
        loading=names_where(trace, is_data_loading),
        worker_loading=names_where(trace, is_worker_data_loading),
        collective=names_where(trace, is_host_collective),
        outer_ops=top_level(trace.table(Kind.CPU_OP)),
    )


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
    syncs = intervals.join(runtime.spans(index.sync), ops.spans(index.sync))
    sync_union = intervals.union(*syncs)
    in_it = [t.name[in_window(t, window)] for t in (runtime.table, ops.table)]
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


def shared_host_index(ctx: TraceContext) -> HostIndex:
    """The trace's HostIndex, built once per trace for every analysis that asks."""
    return host_index(ctx.trace)


def _launches(w: WindowContext) -> LaunchStats:
    return launch_stats(w.trace.trace, w.trace.once(shared_host_index), w.window, w.trace.device)


def _host(w: WindowContext) -> HostStats:
    busy = w.trace.busy if w.has_device_events else None
    return host_stats(w.trace.trace, w.trace.once(shared_host_index), w.window, busy)


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
    data=lambda s: {**dataclasses.asdict(s), "cpu_per_launch_s": s.cpu_per_launch_s},
    describe=_describe_launches,
)
HOST = WindowAnalyzer(
    key="host",
    analyse=_host,
    data=lambda h: {**dataclasses.asdict(h), "overhead_s": h.overhead_s},
    describe=_describe_host,
)
DEVICE_SYNCS = WindowAnalyzer(
    key="device_syncs", analyse=_device_syncs, data=dict, describe=_describe_device_syncs
)
