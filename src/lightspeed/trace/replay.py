"""A GPU trace's steps replayed from their dependency graph (Daydream, ATC'20): the check
that the graph holds what decides each step's time, before any of it is changed.

The graph, from one rank's trace:

- **host tasks**: per CPU thread, its runtime calls (launches, copies, syncs) in order,
  with the time between two calls kept as a task of its own (the host's own work: the
  ops' Python and dispatch), and each `ProfilerStep#N` start as a marker of no duration;
- **device tasks**: kernels, copies and sets, per stream in the order they ran;
- **edges**: each thread's order; each stream's order; launch → its device task (by
  `correlation`: the task is ready when the call returns); syncs: a call that blocks
  the host returns once the device work launched before it has ended: all of it for
  `cudaDeviceSynchronize` and `cudaEventSynchronize`, one stream's for
  `cudaStreamSynchronize` and a blocking `cudaMemcpy` (the stream of the thread's last
  launch: old traces do not name it); waits of one stream on another's event
  (`cudaStreamWaitEvent`: the stream and the event are inferred, `_StreamWaits`); and
  wake-ups: a thread other than the steps' that waited, no op of its own running (the
  autograd engine's between two backward passes), goes on after the task of another
  thread that ended last before it, not after its gap.

The replay is a discrete-event simulation from durations and edges alone: no traced start
time is read but to order the tasks (a thread's calls, a stream's tasks), to place each
thread's first task, to tell which task a stream's wait was for, and for a device task whose
launch the trace did not record (no edge says when it could start). A sync's duration comes
from what it waits for; every other task keeps its traced duration. A CUDA graph's nodes
keep the wait each had in the trace after its launch and the node before it, as host gaps
are kept: what a graph's nodes wait on is not recorded. Unchanged, the replay reproduces
each traced step, which is what `replay_steps` measures: a task shifted in the trace
shifts nothing here.

Changed (`replay_steps`' arguments): the device tasks' durations, each step's device work
captured as one CUDA graph, each optimizer step's update as one fused pass; one run's ranks
replayed together, their collectives joined (`replay_ranks`). `trace.whatif` makes the
changes.

What it leaves out, so far: the steps' thread waiting for another (`loss.backward()` for
the autograd engine's), and the event a stream waits on where no task of another stream
ended before the waiting one began.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from lightspeed.trace.downsample import Blocks
from lightspeed.trace.events import NO_ID, FloatArray, Kind, Trace
from lightspeed.trace.names import KERNEL_TYPES, KernelType, name_types
from lightspeed.trace.steps import DEVICE_KINDS, StepWindow, step_windows
from lightspeed.trace.timeline import CATEGORIES, Category, Lane, Timeline, drawn

__all__ = [
    "DeviceDurations",
    "Inserted",
    "ReplayedStep",
    "StepGraph",
    "StepReplay",
    "replay_graphs",
    "replay_ranks",
    "replay_steps",
    "step_graph",
]

# New durations (µs) of a trace's device events, per kind, row for row of its tables.
DeviceDurations = dict[Kind, FloatArray]

# Runtime calls that return only once device work launched before them has ended: the
# whole device's, or one stream's (old traces do not name it: the stream of the thread's
# last launch, where `.item()` and `.cpu()` put their copy before they wait).
_DEVICE_SYNCS = ("DeviceSynchronize", "EventSynchronize", "CtxSynchronize")
_STREAM_SYNCS = ("StreamSynchronize",)
_BLOCKING_COPIES = ("cudaMemcpy", "hipMemcpy")
_ASYNC = "Async"
_NONE, _DEVICE, _STREAM = 0, 1, 2
_COMMUNICATION = KERNEL_TYPES.index(KernelType.COMMUNICATION)
_MEMORY = KERNEL_TYPES.index(KernelType.MEMORY)


@functools.lru_cache(maxsize=4096)
def _blocking(name: str) -> int:
    """How the runtime call `name` waits for the device: not, for all of it, or for one
    stream (a blocking copy waits for its own copy's stream)."""
    if any(s in name for s in _DEVICE_SYNCS):
        return _DEVICE
    if any(s in name for s in _STREAM_SYNCS):
        return _STREAM
    if name.startswith(_BLOCKING_COPIES) and _ASYNC not in name:
        return _STREAM
    return _NONE


@dataclasses.dataclass(frozen=True)
class Inserted:
    """A device task added to a trace's graph on a stream of its own (a data-parallel
    all-reduce): launched by thread `tid` at `at_us` (traced time, µs), once the device
    work that thread launched before it has ended, for `duration_us`; the first device
    task launched after `joined_at_us` (any thread) waits for it."""

    at_us: float
    tid: int
    duration_us: float
    joined_at_us: float


@dataclasses.dataclass(frozen=True)
class ReplayedStep:
    """One `ProfilerStep#N` as traced and as replayed: its duration and the device's busy
    time inside it (kernels, copies and sets, overlaps counted once), in seconds."""

    number: int
    traced_s: float
    replayed_s: float
    traced_busy_s: float
    replayed_busy_s: float
    # From the first start to the last end of the device work the step launched.
    device_span_s: float = 0.0

    @property
    def step_s(self) -> float:
        """The step's time as a loop of such steps runs it: its host's span, or its
        device work's where that is longer (a host that queues ahead of its GPU, with
        no sync to wait in, still waits for it steps later)."""
        return max(self.replayed_s, self.device_span_s)

    @property
    def error(self) -> float:
        """The replayed duration's relative error against the traced one."""
        return self.replayed_s / self.traced_s - 1 if self.traced_s > 0 else 0.0

    @property
    def idle_points(self) -> float:
        """The device's idle share, replayed minus traced, in percentage points."""
        traced = 1 - self.traced_busy_s / self.traced_s if self.traced_s > 0 else 0.0
        replayed = 1 - self.replayed_busy_s / self.replayed_s if self.replayed_s > 0 else 0.0
        return 100 * (replayed - traced)


@dataclasses.dataclass(frozen=True)
class StepReplay:
    """A trace's steps replayed: each step (the last, cut by the profiler, left out),
    the graph's size, and, where asked for, the first step's timeline as replayed."""

    steps: tuple[ReplayedStep, ...]
    host_tasks: int
    device_tasks: int
    syncs: int
    # The device time of the steps' tasks (their launches in the steps above), seconds,
    # by kind (computation, communication, memory, other) and by stream ("stream 7").
    device_time_s: dict[str, float] = dataclasses.field(default_factory=dict)
    timeline: Timeline | None = None


@dataclasses.dataclass(frozen=True)
class _Device:
    """A trace's device tasks (kernels, copies, sets) in each stream's order: stream,
    traced start, duration as replayed and as traced (µs), correlation, name id, kind
    (`KERNEL_TYPES` index) and whether it is a copy or a set."""

    stream: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    traced_dur: np.ndarray
    correlation: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    memory: np.ndarray


def _device_tasks(trace: Trace, durations: DeviceDurations | None) -> _Device:
    """Every device task of `trace`, its duration `durations`' where given."""
    kinds = [kind for kind in DEVICE_KINDS if kind in trace.tables]
    tables = [trace.table(kind) for kind in kinds]
    if not tables:
        empty = np.zeros(0, np.int64)
        return _Device(empty, np.zeros(0), np.zeros(0), np.zeros(0), empty, empty, empty, empty)
    streams = np.concatenate([t.tid for t in tables])
    ts = np.concatenate([t.ts_us for t in tables])
    order = np.lexsort((ts, streams))
    traced = np.concatenate([t.dur_us for t in tables])[order]
    changed = (
        np.concatenate([durations.get(k, t.dur_us) for k, t in zip(kinds, tables, strict=True)])[
            order
        ]
        if durations is not None
        else traced.copy()
    )
    names = np.concatenate([t.name for t in tables])[order]
    memory = np.concatenate(
        [np.full(len(t), k is not Kind.KERNEL) for k, t in zip(kinds, tables, strict=True)]
    )[order]
    return _Device(
        stream=streams[order],
        ts=ts[order],
        dur=changed.astype(np.float64),
        traced_dur=traced,
        correlation=np.concatenate([t.correlation for t in tables])[order],
        name=names,
        kind=name_types(trace)[names],
        memory=memory,
    )


@dataclasses.dataclass
class StepGraph:
    """One rank's steps as a dependency graph (see the module's docstring), changed or
    not, ready to replay alone or joined with its run's other ranks (`replay_graphs`).
    It holds no function, so it travels between processes."""

    # Host tasks in traced order of start: thread, duration (µs), kind, device rows.
    threads: list[int]
    durations: list[float]
    blocking: list[int]  # _NONE, _DEVICE or _STREAM
    launches: list[list[int]]  # the device tasks each call launches (rows of `device`)
    names: list[int]  # each host task's runtime call, by name id (-1: the host's own work)
    markers: dict[int, int]  # host task index → step number (-2 - N: the end of step N)
    first_start: dict[int, float]  # thread → its first task's traced start (µs)
    # Host task index → (the task on another thread that woke it, µs after that one's
    # end): for a task after an idle gap of its thread, in place of the gap.
    woken_by: dict[int, tuple[int, float]]
    device: _Device
    # Per device task, the step number of the call that launched it (-1: none).
    device_step: np.ndarray
    # Device task → the device tasks (on other streams) that must end before it starts.
    waits: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    # Device task → µs it waited in the trace past all that the graph says it waits for
    # (only for a CUDA graph's tasks: what a graph's nodes wait on is not recorded).
    lags: dict[int, float] = dataclasses.field(default_factory=dict)
    # The trace's step windows, and its names with the graph's own after them.
    windows: list[StepWindow] = dataclasses.field(default_factory=list)
    trace_names: tuple[str, ...] = ()


# A host row of the graph as it is built: traced start and duration (µs), thread, name
# id (-1: a step's marker), correlation, and the step a marker begins (N) or ends
# (-2 - N), -1 for a runtime call.
_Row = tuple[float, float, int, int, int, int]


def _graph(
    trace: Trace,
    durations: DeviceDurations | None,
    graphs: bool,
    fused_optimizer: bool = False,
    inserted: Sequence[Inserted] = (),
) -> StepGraph:
    inserted = sorted(inserted, key=lambda x: x.at_us)  # one stream, in order
    device = _device_tasks(trace, durations)
    if inserted:
        # Correlations past every one the trace uses, host calls' included.
        used = [device.correlation]
        if Kind.RUNTIME in trace.tables:
            used.append(trace.table(Kind.RUNTIME).correlation)
        first = int(max(c.max(initial=0) for c in used)) + 1
        device = _with_inserted(device, inserted, len(trace.names) + 1, first)
    names = (*trace.names, _HOST_WORK, _INSERTED)
    by_correlation: dict[int, list[int]] = {}
    for row, corr in enumerate(device.correlation.tolist()):
        if corr != NO_ID:
            by_correlation.setdefault(corr, []).append(row)
    rows: list[_Row] = []
    if Kind.RUNTIME in trace.tables:
        runtime = trace.table(Kind.RUNTIME)
        rows = list(
            zip(
                runtime.ts_us.tolist(),
                runtime.dur_us.tolist(),
                runtime.tid.tolist(),
                runtime.name.tolist(),
                runtime.correlation.tolist(),
                [-1] * len(runtime),
                strict=True,
            )
        )
    first_inserted = len(device.dur) - len(inserted)
    rows += [
        (x.at_us, 0.0, x.tid, len(names) - 1, int(device.correlation[first_inserted + k]), -1)
        for k, x in enumerate(inserted)
    ]
    # The first launch after each inserted task's `joined_at_us` waits for it.
    joins = sorted((x.joined_at_us, first_inserted + k) for k, x in enumerate(inserted))
    windows = step_windows(trace)
    main = _step_thread(trace) if windows else 0
    for w in windows:
        assert w.number is not None
        rows.append((w.start_us, 0.0, main, -1, NO_ID, w.number))
        rows.append((w.end_us, 0.0, main, -1, NO_ID, -2 - w.number))
    rows.sort(key=lambda r: (r[0], r[5] < 0))
    capture = (
        _captured(trace, rows, windows, by_correlation, main)
        if graphs
        else _Capture({}, set(), set())
    )
    if fused_optimizer:
        fused_rows, fused_zero = _fused_optimizer(trace, rows, by_correlation)
        capture.zero.update(fused_zero)
        for first, others in fused_rows:
            device.dur[first] = FUSED_ADAMW_SHARE * float(device.dur[[first, *others]].sum())
            device.dur[others] = 0.0
    graph = StepGraph(
        [], [], [], [], [], {}, {}, {}, device, np.full(len(device.dur), -1, dtype=np.int64)
    )
    graph.windows, graph.trace_names = list(windows), names
    numbers = [-1 if w.number is None else w.number for w in windows]
    window_starts = [w.start_us for w in windows]
    window_ends = [w.end_us for w in windows]
    last_end: dict[int, float] = {}
    busy = _cpu_spans(trace)
    # Per thread, the traced ends of its tasks so far and their indices, in order.
    ends: dict[int, list[float]] = {}
    tasks: dict[int, list[int]] = {}
    waits = _StreamWaits(device, first_inserted)
    last_launch: dict[int, int] = {}  # thread → the device task it launched last
    for position, (ts, dur, tid, name, corr, step) in enumerate(rows):
        gap = ts - last_end[tid] if tid in last_end else 0.0
        idle = tid != main and (
            tid not in last_end or not _covered(busy.get(tid), last_end[tid], ts)
        )
        waker = _waker(ends, tasks, tid, ts) if idle else None
        if tid not in last_end:
            graph.first_start[tid] = ts
        if waker is not None:
            graph.woken_by[len(graph.durations)] = (waker[0], ts - waker[1])
        elif tid in last_end and position not in capture.zero and gap > 0:
            _add(graph, tid, gap, blocking=_NONE, launches=[])
        last_end[tid] = max(last_end.get(tid, ts), ts + dur)
        ends.setdefault(tid, []).append(ts + dur)
        tasks.setdefault(tid, []).append(len(graph.durations))
        if position in capture.zero:
            dur = 0.0
        if step != -1:
            graph.markers[len(graph.durations)] = step
            _add(graph, tid, 0.0, blocking=_NONE, launches=[])
            continue
        if position in capture.graph_launch:
            launched = capture.graph_launch[position]
        elif position in capture.launched_in_graph:
            launched = []
        else:
            launched = by_correlation.get(corr, [])
        blocking = _blocking(names[name])
        if _waits_on_event(names[name]):
            waits.called(tid)
        if _launches_graph(names[name]):
            graph.lags.update(_graph_lags(device, by_correlation.get(corr, []), ts))
        mine = by_correlation.get(corr, [])
        waits.launched(tid, mine)
        if mine and mine[0] >= first_inserted:
            if tid in last_launch:  # the stream it launches on waits for the thread's work
                waits.edges.setdefault(mine[0], []).append(last_launch[tid])
        elif mine:
            while joins and joins[0][0] < ts:
                waits.edges.setdefault(mine[0], []).append(joins.pop(0)[1])
            last_launch[tid] = mine[-1]
        _add(graph, tid, dur, blocking=blocking, launches=launched, name=name)
        if launched and windows:
            at = bisect.bisect_right(window_starts, ts) - 1
            if at >= 0 and ts < window_ends[at]:
                graph.device_step[launched] = numbers[at]
    graph.waits = waits.edges
    return graph


def _with_inserted(device: _Device, inserted: Sequence[Inserted], name: int, first: int) -> _Device:
    """`device` with the `inserted` tasks after its rows, on a stream of their own (one
    past the trace's), with correlations from `first` on and the name id `name`."""
    n = len(inserted)
    stream = int(device.stream.max()) + 1 if len(device.stream) else 0
    return _Device(
        stream=np.r_[device.stream, np.full(n, stream, np.int64)],
        ts=np.r_[device.ts, [x.at_us for x in inserted]],
        dur=np.r_[device.dur, [x.duration_us for x in inserted]],
        traced_dur=np.r_[device.traced_dur, np.zeros(n)],
        correlation=np.r_[device.correlation, np.arange(first, first + n, dtype=np.int64)],
        name=np.r_[device.name, np.full(n, name, np.int64)],
        kind=np.r_[device.kind, np.full(n, _COMMUNICATION, device.kind.dtype)],
        memory=np.r_[device.memory, np.zeros(n, bool)],
    )


@functools.lru_cache(maxsize=4096)
def _launches_graph(name: str) -> bool:
    """Whether the runtime call `name` launches a CUDA (or HIP) graph."""
    return "GraphLaunch" in name


def _graph_lags(device: _Device, rows: list[int], called_us: float) -> dict[int, float]:
    """For the device tasks `rows` of one graph launch called at `called_us` (traced),
    each one's wait in the trace after both the call and the task before it in its
    stream: a graph's nodes wait on one another and on events captured with them, none
    of which the trace records, so each keeps its traced wait. (A graph's first nodes
    run while the call that launches them has yet to return.)"""
    lags = {}
    for row in rows:
        before = row - 1  # the task before it in its stream, if any
        ready = called_us
        if before >= 0 and device.stream[before] == device.stream[row]:
            ready = max(ready, float(device.ts[before] + device.traced_dur[before]))
        lags[row] = max(0.0, float(device.ts[row]) - ready)
    return lags


@functools.lru_cache(maxsize=4096)
def _waits_on_event(name: str) -> bool:
    """Whether the runtime call `name` makes a stream wait on an event."""
    return "StreamWaitEvent" in name


# A device task that waits on another stream's event starts no earlier than the task the
# event follows ends; traced times are rounded, to a microsecond in old traces.
_WAIT_TOLERANCE_US = 1.0


class _StreamWaits:
    """The waits of one stream on another's event (`cudaStreamWaitEvent`). Traces record
    the wait but neither the event's stream nor the waiting one, so both are inferred:
    the waiting stream is that of the thread's next launch (PyTorch makes a stream wait
    right before it launches on it: a collective's stream on the compute stream, the
    compute stream on a collective or a copy), and the event follows a task launched on
    another stream before the wait: of those the waiting task started after in the
    trace, the one that ended last (what it waited for, if anything did)."""

    def __init__(self, device: _Device, traced: int) -> None:
        self.device = device
        self.traced = traced  # the rows past it are inserted: no event follows them
        self.ends = device.ts + device.traced_dur
        # Rows are in each stream's order: a stream's rows are one run of them.
        streams, first = np.unique(device.stream, return_index=True)
        self.first = dict(zip(streams.tolist(), first.tolist(), strict=True))
        self.last_on: dict[int, int] = {}  # stream → its device task launched last
        self.open: dict[int, list[dict[int, int]]] = {}  # thread → its waits' candidates
        self.edges: dict[int, list[int]] = {}

    def called(self, tid: int) -> None:
        self.open.setdefault(tid, []).append(dict(self.last_on))

    def launched(self, tid: int, rows: list[int]) -> None:
        if not rows:
            return
        device = self.device
        for launched_before in self.open.pop(tid, []):
            waiter = rows[0]
            stream = int(device.stream[waiter])
            start = float(device.ts[waiter]) + _WAIT_TOLERANCE_US
            ended = []
            for other, last in launched_before.items():
                lo = self.first[other]
                # The stream's last task launched before the wait to end before `start`.
                at = lo + int(np.searchsorted(self.ends[lo : last + 1], start, side="right")) - 1
                if other != stream and at >= lo:
                    ended.append((float(self.ends[at]), at))
            if ended:
                edge = max(ended)[1]
                if edge not in self.edges.get(waiter, ()):
                    self.edges.setdefault(waiter, []).append(edge)
        for row in rows:
            if row < self.traced:
                self.last_on[int(device.stream[row])] = row


def _launches_in(
    rows: Sequence[_Row],
    spans: Sequence[tuple[float, float, int | None]],
    by_correlation: dict[int, list[int]],
) -> list[list[int]]:
    """For each of `spans` (start, end µs, and the thread whose launches count, None: any;
    in order of start, none overlapping), the positions in `rows` of the launches made
    in it, in order."""
    starts = [lo for lo, _, _ in spans]
    found: list[list[int]] = [[] for _ in spans]
    for position, (ts, _, tid, _, corr, step) in enumerate(rows):
        if step != -1 or corr not in by_correlation:
            continue
        i = bisect.bisect_right(starts, ts) - 1
        if i >= 0 and ts < spans[i][1] and spans[i][2] in (None, tid):
            found[i].append(position)
    return found


def _host_between(trace: Trace, rows: Sequence[_Row], positions: list[int], tid: int) -> set[int]:
    """The positions of `tid`'s host rows after the first of `positions` up to the last
    that one launch stands for once they run as one: its calls but syncs, and the host's
    work before each."""
    return {
        position
        for position in range(positions[0] + 1, positions[-1] + 1)
        if rows[position][2] == tid
        and rows[position][5] == -1
        and _blocking(trace.names[rows[position][3]]) == _NONE
    }


# A fused AdamW reads a parameter, its gradient and both moments once and writes the
# parameter and the moments once: 7 accesses an element. The multi-tensor (foreach) AdamW
# makes 20 (12 reads, 8 writes over its 8 passes: weight decay, lerp, mul, addcmul, sqrt,
# div, add, addcdiv), as does one parameter at a time. Its kernels, memory-bound, are
# taken at the same share of the bandwidth fused as not.
FUSED_ADAMW_SHARE = 7 / 20
_OPTIMIZER_STEP = "Optimizer.step#"


def _fused_optimizer(
    trace: Trace, rows: Sequence[_Row], by_correlation: dict[int, list[int]]
) -> tuple[list[tuple[int, list[int]]], set[int]]:
    """Each `Optimizer.step#…` span's update as one fused pass: per span, its first
    device task and the others it replaces, and the host rows that then take no time
    (from the span's first launch to its last on its thread, as one launch stands for
    them all)."""
    if Kind.ANNOTATION not in trace.tables:
        return [], set()
    annotations = trace.table(Kind.ANNOTATION)
    spans: list[tuple[float, float, int | None]] = sorted(
        (float(annotations.ts_us[i]), float(annotations.end_us[i]), int(annotations.tid[i]))
        for i in range(len(annotations))
        if trace.names[annotations.name[i]].startswith(_OPTIMIZER_STEP)
    )
    fused: list[tuple[int, list[int]]] = []
    zero: set[int] = set()
    for (_, _, tid), launches in zip(spans, _launches_in(rows, spans, by_correlation), strict=True):
        if not launches:
            continue
        device = [r for p in launches for r in by_correlation[rows[p][4]]]
        fused.append((device[0], device[1:]))
        assert tid is not None
        zero |= _host_between(trace, rows, launches, tid)
    return fused, zero


@dataclasses.dataclass
class _Capture:
    """Each step's device work as one CUDA graph: the row that launches it (the step's
    first launch, on any thread) with every device task launched in the step, and the
    rows that then take no time, nor any host time before them."""

    graph_launch: dict[int, list[int]]  # row position → the device rows it launches
    launched_in_graph: set[int]  # positions of the launches the graph replaces
    zero: set[int]


def _captured(
    trace: Trace,
    rows: Sequence[_Row],
    windows: Sequence[StepWindow],
    by_correlation: dict[int, list[int]],
    main: int,
) -> _Capture:
    """What capturing each step's device work as one CUDA graph changes (`_Capture`).
    On the step's thread (`main`), from its first launch to its last, the host's work
    and the launches take no time: the graph runs none of the host's code in between.
    Syncs, and everything outside those spans, stay."""
    capture = _Capture({}, set(), set())
    spans: list[tuple[float, float, int | None]] = [(w.start_us, w.end_us, None) for w in windows]
    for positions in _launches_in(rows, spans, by_correlation):
        if not positions:
            continue
        first = positions[0]
        capture.graph_launch[first] = [r for p in positions for r in by_correlation[rows[p][4]]]
        capture.launched_in_graph.update(positions[1:])
        on_main = [p for p in positions if rows[p][2] == main]
        if on_main:
            capture.zero |= _host_between(trace, rows, on_main, main)
    return capture


def _add(
    graph: StepGraph, tid: int, dur: float, *, blocking: int, launches: list[int], name: int = -1
) -> None:
    graph.names.append(name)
    graph.threads.append(tid)
    graph.durations.append(dur)
    graph.blocking.append(blocking)
    graph.launches.append(launches)


def _cpu_spans(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread, its CPU ops' starts (sorted) and the running latest end up to each:
    to tell a gap in which the thread computed from one in which it waited."""
    if Kind.CPU_OP not in trace.tables:
        return {}
    ops = trace.table(Kind.CPU_OP)
    spans = {}
    for tid in np.unique(ops.tid).tolist():
        mine = np.flatnonzero(ops.tid == tid)
        order = mine[np.argsort(ops.ts_us[mine], kind="stable")]
        spans[tid] = (ops.ts_us[order], np.maximum.accumulate(ops.end_us[order]))
    return spans


def _covered(spans: tuple[np.ndarray, np.ndarray] | None, lo: float, hi: float) -> bool:
    """Whether a CPU op of the thread runs at the middle of [lo, hi)."""
    if spans is None or hi <= lo:
        return True  # no ops recorded, or no gap: the thread's own time
    starts, reach = spans
    middle = (lo + hi) / 2
    i = int(np.searchsorted(starts, middle, side="right")) - 1
    return i >= 0 and reach[i] > middle


def _waker(
    ends: dict[int, list[float]], tasks: dict[int, list[int]], tid: int, ts: float
) -> tuple[int, float] | None:
    """The task on another thread that ended last before `ts` (its index and traced end),
    the one whose end let a waiting thread go on; None when there is none."""
    best: tuple[int, float] | None = None
    for other, mine in ends.items():
        if other == tid or not mine:
            continue
        i = bisect.bisect_right(mine, ts) - 1
        if i >= 0 and (best is None or mine[i] > best[1]):
            best = (tasks[other][i], mine[i])
    return best


def _step_thread(trace: Trace) -> int:
    """The thread the ProfilerStep annotations are on."""
    annotations = trace.table(Kind.ANNOTATION)
    for i in range(len(annotations)):
        if trace.names[annotations.name[i]].startswith("ProfilerStep#"):
            return int(annotations.tid[i])
    return 0


# Each host task's replayed start and end, and each device task's (µs).
_Simulated = tuple[list[float], list[float], np.ndarray, np.ndarray]


def _simulate(graph: StepGraph) -> _Simulated:
    """Each host task's replayed start and end, and each device task's replayed start
    and end (µs), from the graph's durations and edges."""
    device = graph.device
    clock: dict[int, float] = {}
    stream_free: dict[int, float] = {}
    # A stream's tasks run in their traced order: a task waits for the one before it.
    order_in_stream: dict[int, int] = {}
    device_start = np.full(len(device.dur), np.nan)
    device_end = np.full(len(device.dur), np.nan)
    pending: dict[int, float] = {}  # device row → the time its launch returned
    host_start: list[float] = []
    launched_end = 0.0  # the latest end of every device task launched so far

    waits, lags = graph.waits, graph.lags
    blocked: dict[int, list[int]] = {}  # device task → the streams waiting for its end

    def run_device(row: int, ready: float) -> float:
        stream = int(device.stream[row])
        start = max(ready, stream_free.get(stream, -np.inf))
        for other in waits.get(row, ()):
            start = max(start, float(device_end[other]))
        start += lags.get(row, 0.0)
        end = start + float(device.dur[row])
        stream_free[stream] = end
        device_start[row], device_end[row] = start, end
        return end

    streams_rows: dict[int, list[int]] = {}
    for row, stream in enumerate(device.stream.tolist()):
        streams_rows.setdefault(stream, []).append(row)

    def release(stream: int) -> None:
        """Run the stream's tasks whose launches have returned, in the stream's order,
        up to one waiting for another stream's task yet to run; and then the streams
        that were waiting for those that ran."""
        nonlocal launched_end
        todo = [stream]
        while todo:
            stream = todo.pop()
            rows = streams_rows[stream]
            i = order_in_stream.get(stream, 0)
            while i < len(rows) and rows[i] in pending:
                row = rows[i]
                unrun = [w for w in waits.get(row, ()) if np.isnan(device_end[w])]
                if unrun:
                    blocked.setdefault(unrun[0], []).append(stream)
                    break
                launched_end = max(launched_end, run_device(row, pending.pop(row)))
                todo += blocked.pop(row, [])
                i += 1
            order_in_stream[stream] = i

    # A device task whose launch is not in the trace (launched before the profiler
    # started, or by a call it did not record) has no edge to say when it could start:
    # its traced start stands for that, the one traced start the replay reads.
    launched = {row for rows in graph.launches for row in rows}
    for row in range(len(device.dur)):
        if row not in launched:
            pending[row] = float(device.ts[row])
    for stream in streams_rows:
        release(stream)
    last_stream: dict[int, int] = {}  # thread → the stream of its last launch
    host_end: list[float] = []
    for index, tid in enumerate(graph.threads):
        start = clock.get(tid, graph.first_start.get(tid, 0.0))
        if index in graph.woken_by:
            waker, after = graph.woken_by[index]
            woken = host_end[waker] + after
            start = woken if tid not in clock else max(start, woken)
        host_start.append(start)
        blocking = graph.blocking[index]
        # A sync lasts as long as what it waits for: its traced duration is that wait.
        end = start + (graph.durations[index] if blocking == _NONE else 0.0)
        for row in graph.launches[index]:
            pending[row] = start if row in lags else end
            last_stream[tid] = int(device.stream[row])
            release(last_stream[tid])
        if blocking == _DEVICE or (blocking == _STREAM and tid not in last_stream):
            end = max(end, launched_end)
        elif blocking == _STREAM:
            end = max(end, stream_free.get(last_stream[tid], end))
        clock[tid] = end
        host_end.append(end)
    if blocked:
        # Inferred waits that wait on one another (traced times within the tolerance):
        # the tasks they hold back run without them.
        waits = {}
        for stream in streams_rows:
            release(stream)
    return host_start, host_end, device_start, device_end


def _busy(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> float:
    """The length of the union of [starts, ends) clipped to [lo, hi), in µs."""
    keep = (ends > lo) & (starts < hi) & np.isfinite(starts)
    if not keep.any():
        return 0.0
    s = np.clip(starts[keep], lo, hi)
    e = np.clip(ends[keep], lo, hi)
    order = np.argsort(s)
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new interval begins where a start lies beyond every earlier end.
    begins = np.concatenate([[True], s[1:] > reach[:-1]])
    group = np.cumsum(begins) - 1
    lengths = np.zeros(group[-1] + 1)
    np.maximum.at(lengths, group, reach)
    firsts = s[begins]
    return float((lengths - firsts).sum())


def _span(starts: np.ndarray, ends: np.ndarray, mine: np.ndarray) -> float:
    """Seconds from the first start to the last end of the tasks in `mine` (0: none)."""
    keep = mine & np.isfinite(starts)
    if not keep.any():
        return 0.0
    return float(ends[keep].max() - starts[keep].min()) * 1e-6


def replay_steps(
    trace: Trace,
    durations: DeviceDurations | None = None,
    *,
    graphs: bool = False,
    fused_optimizer: bool = False,
    inserted: Sequence[Inserted] = (),
    timeline: bool = False,
) -> StepReplay:
    """Replay `trace`'s steps from its dependency graph (see the module's docstring):
    each `ProfilerStep#N` but the last, its traced and replayed duration and device busy
    time. Unchanged by default; `durations` (µs, per device-event kind, row for row of
    the trace's tables) replaces the device tasks' durations, `graphs` captures each
    step's device work as one CUDA graph (`_captured`), `fused_optimizer` runs each
    optimizer step's update as one fused pass (`_fused_optimizer`), and `inserted` adds
    device tasks (`Inserted`). `timeline`: the first step's timeline too
    (`StepReplay.timeline`)."""
    (replayed,) = replay_graphs(
        [step_graph(trace, durations, graphs=graphs, fused_optimizer=fused_optimizer,
                    inserted=inserted)],
        timeline=timeline,
    )  # fmt: skip
    return replayed


def step_graph(
    trace: Trace,
    durations: DeviceDurations | None = None,
    *,
    graphs: bool = False,
    fused_optimizer: bool = False,
    inserted: Sequence[Inserted] = (),
) -> StepGraph:
    """`trace`'s steps as a dependency graph with the changes given (as `replay_steps`
    takes them), to replay with `replay_graphs`."""
    return _graph(trace, durations, graphs, fused_optimizer, inserted)


def replay_graphs(
    graphs: Sequence[StepGraph], *, comm_speedup: float = 1.0, timeline: bool = False
) -> list[StepReplay]:
    """Each graph's steps replayed (`step_graph`); several graphs are the ranks of one
    run, replayed together with their collectives joined (`replay_ranks`), in which
    each collective's transfer is divided by `comm_speedup`. The graphs are changed."""
    built = list(graphs)
    keys = [_collective_keys(g) for g in built]
    joined = set.intersection(*(set(k) for k in keys)) if len(keys) > 1 else set()
    if joined:
        _join(built, keys, joined, comm_speedup)
    return [_replayed(g, _simulate(g), timeline) for g in built]


def _replayed(graph: StepGraph, simulated: _Simulated, timeline: bool) -> StepReplay:
    """The steps of a graph from its simulation (`_simulate`)."""
    host_start, _, device_start, device_end = simulated
    device = graph.device
    at = {number: host_start[index] for index, number in graph.markers.items()}
    traced_end = device.ts + device.traced_dur
    steps = []
    windows = graph.windows
    for w in windows[:-1]:
        assert w.number is not None
        if w.number not in at or -2 - w.number not in at:
            continue
        lo, hi = at[w.number], at[-2 - w.number]
        steps.append(
            ReplayedStep(
                number=w.number,
                traced_s=w.duration_us * 1e-6,
                replayed_s=(hi - lo) * 1e-6,
                traced_busy_s=_busy(device.ts, traced_end, w.start_us, w.end_us) * 1e-6,
                replayed_busy_s=_busy(device_start, device_end, lo, hi) * 1e-6,
                device_span_s=_span(device_start, device_end, graph.device_step == w.number),
            )
        )
    first = windows[0].number if len(windows) > 1 else None
    return StepReplay(
        steps=tuple(steps),
        host_tasks=len(graph.durations),
        device_tasks=len(device.dur),
        syncs=sum(1 for b in graph.blocking if b != _NONE),
        device_time_s=_device_time(graph, [s.number for s in steps]),
        timeline=_timeline(graph, simulated, first) if timeline else None,
    )


def _device_time(graph: StepGraph, numbers: list[int]) -> dict[str, float]:
    """The device time (s) of the tasks launched in the steps `numbers`, by kind, then
    by stream."""
    device = graph.device
    mine = np.isin(graph.device_step, numbers)
    out: dict[str, float] = {}
    for code, kind in enumerate(KERNEL_TYPES):
        seconds = float(device.dur[mine & (device.kind == code)].sum()) * 1e-6
        if seconds > 0:
            out[kind.value] = seconds
    for stream in np.unique(device.stream[mine]).tolist():
        out[f"stream {stream}"] = float(device.dur[mine & (device.stream == stream)].sum()) * 1e-6
    return out


# A joint replay stops once no collective's start moves by more than this (µs), or after
# this many rounds.
_JOIN_TOLERANCE_US = 0.01
_JOIN_ROUNDS = 50


def replay_ranks(
    traces: Sequence[Trace],
    durations: Sequence[DeviceDurations | None] | None = None,
    *,
    graphs: bool = False,
    fused_optimizer: bool = False,
    comm_speedup: float = 1.0,
    timeline: bool = False,
) -> list[StepReplay]:
    """The ranks of one run replayed together, their collectives joined (see
    `trace.collectives`: the k-th kernel of a name in a step is the same collective on
    every rank). A collective's transfer is its shortest kernel across the ranks (the
    last to arrive waits for no one), divided by `comm_speedup`; on every rank it ends
    at the last rank's arrival plus the transfer. The ranks' clocks are aligned on their
    first joined collective's traced end, which is one instant on every rank. Each rank
    otherwise as `replay_steps` replays it, with `durations[r]` and the other changes."""
    per_rank = list(durations) if durations is not None else [None] * len(traces)
    built = [
        step_graph(t, d, graphs=graphs, fused_optimizer=fused_optimizer)
        for t, d in zip(traces, per_rank, strict=True)
    ]
    return replay_graphs(built, comm_speedup=comm_speedup, timeline=timeline)


def _join(
    built: list[StepGraph],
    keys: list[dict[tuple[int, int, int], int]],
    joined: set[tuple[int, int, int]],
    comm_speedup: float,
) -> None:
    """Set each joined collective's duration on every rank to its transfer plus its
    wait for the last rank to arrive, simulating the ranks until the arrivals settle."""
    devices = [g.device for g in built]
    transfer = {
        k: min(float(d.dur[ks[k]]) for d, ks in zip(devices, keys, strict=True)) / comm_speedup
        for k in joined
    }
    first = min(joined, key=lambda k: float(devices[0].ts[keys[0][k]]))
    ends = [
        float(d.ts[ks[first]] + d.traced_dur[ks[first]])
        for d, ks in zip(devices, keys, strict=True)
    ]
    offsets = [end - ends[0] for end in ends]  # a rank's clock less rank 0's
    for d, ks in zip(devices, keys, strict=True):
        for k in joined:
            d.dur[ks[k]] = transfer[k]
    for _ in range(_JOIN_ROUNDS):
        starts = [_simulate(g)[2] for g in built]
        arrivals = {
            k: [float(st[ks[k]]) - off for st, ks, off in zip(starts, keys, offsets, strict=True)]
            for k in joined
        }
        moved = 0.0
        for r, (d, ks) in enumerate(zip(devices, keys, strict=True)):
            for k in joined:
                new = transfer[k] + (max(arrivals[k]) - arrivals[k][r])
                moved = max(moved, abs(new - float(d.dur[ks[k]])))
                d.dur[ks[k]] = new
        if moved <= _JOIN_TOLERANCE_US:
            return


def _collective_keys(graph: StepGraph) -> dict[tuple[int, int, int], int]:
    """Each communication kernel of the graph's steps, by (step, name id, occurrence of
    that name in the step): its device-task row."""
    device = graph.device
    seen: dict[tuple[int, int], int] = {}
    keys: dict[tuple[int, int, int], int] = {}
    for row in np.argsort(device.ts, kind="stable").tolist():
        step = int(graph.device_step[row])
        if step < 0 or device.kind[row] != _COMMUNICATION:
            continue
        name = int(device.name[row])
        n = seen.get((step, name), 0)
        seen[step, name] = n + 1
        keys[step, name, n] = row
    return keys


def summary(replays: Sequence[ReplayedStep]) -> tuple[float, float]:
    """The largest and the median |error| of the replayed steps' durations."""
    errors = sorted(abs(s.error) for s in replays)
    if not errors:
        return 0.0, 0.0
    return errors[-1], float(np.median(errors))


_HOST_WORK = "host work"  # the name of the host's own time between two runtime calls
_INSERTED = "all-reduce (predicted)"  # the name of an inserted task and of its launch
_CODE = {c: CATEGORIES.index(c) for c in Category}
_CPU_OP = _CODE[Category.CPU_OP]


def _timeline(graph: StepGraph, simulated: _Simulated, number: int | None) -> Timeline | None:
    """Step `number` as replayed, drawn as `trace.timeline` draws a traced step: a lane
    per host thread and device stream, short runs merged, at most `MAX_EVENTS` blocks."""
    host_start, host_end, device_start, device_end = simulated
    marks = {n: i for i, n in graph.markers.items()}
    if number is None or number not in marks or -2 - number not in marks:
        return None
    device = graph.device
    lo, hi = host_start[marks[number]], host_start[marks[-2 - number]]
    hi = max(hi, lo + _span(device_start, device_end, graph.device_step == number) * 1e6)
    host_names = np.array(graph.names)
    host = np.flatnonzero(np.array(host_end) > np.array(host_start))
    on_device = np.flatnonzero(np.isfinite(device_start) & (device_end > device_start))
    category = np.where(
        device.kind[on_device] == _COMMUNICATION,
        _CODE[Category.COLLECTIVE],
        np.where(
            device.memory[on_device] | (device.kind[on_device] == _MEMORY),
            _CODE[Category.MEMORY],
            _CODE[Category.KERNEL],
        ),
    )
    # The host's own work is named by one id past the trace's names (`_HOST_WORK`).
    work = len(graph.trace_names) - 2
    keys = np.r_[
        np.c_[np.zeros(len(host), np.int64), np.array(graph.threads, np.int64)[host]],
        np.c_[np.ones(len(on_device), np.int64), device.stream[on_device]],
    ]
    blocks = Blocks(
        lane=np.zeros(len(keys), np.int64),
        start_us=np.r_[np.array(host_start)[host], device_start[on_device]],
        end_us=np.r_[np.array(host_end)[host], device_end[on_device]],
        name=np.r_[np.where(host_names[host] < 0, work, host_names[host]), device.name[on_device]],
        category=np.r_[
            np.where(
                np.array(graph.blocking)[host] != _NONE,
                _CODE[Category.SYNC],
                _CODE[Category.CPU_OP],
            ),
            category,
        ],
        count=np.ones(len(keys), np.int64),
    )
    inside = (blocks.end_us > lo) & (blocks.start_us < hi)
    return drawn(
        blocks.take(inside),
        keys[inside],
        lo,
        hi,
        step=number,
        names=graph.trace_names,
        lane_of=_lane,
        events_in_window=int(inside.sum()),
    )


def _lane(kind: int, key: int) -> Lane:
    return Lane(f"thread {key}", "host") if kind == 0 else Lane(f"stream {key}", "device")
