"""A GPU trace's steps as a dependency graph (Daydream, ATC'20), for `trace.replay` to
run again, unchanged or changed.

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

A CUDA graph's nodes keep the wait each had in the trace after its launch and the node
before it, as host gaps are kept: what a graph's nodes wait on is not recorded.

Changes made as the graph is built (`step_graph`'s arguments): the device tasks'
durations, each step's device work captured as one CUDA graph, each optimizer step's
update as one fused pass, and device tasks inserted (a data-parallel step's all-reduces).

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

from lightspeed.trace.events import NO_ID, FloatArray, Kind, Trace
from lightspeed.trace.names import KERNEL_TYPES, KernelType, name_types
from lightspeed.trace.steps import DEVICE_KINDS, StepWindow, step_windows

__all__ = [
    "FUSED_ADAMW_SHARE",
    "DeviceDurations",
    "DeviceTasks",
    "Inserted",
    "StepGraph",
    "step_graph",
    "with_durations",
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
NO_SYNC, DEVICE_SYNC, STREAM_SYNC = 0, 1, 2
COMMUNICATION = KERNEL_TYPES.index(KernelType.COMMUNICATION)
MEMORY = KERNEL_TYPES.index(KernelType.MEMORY)


@functools.lru_cache(maxsize=4096)
def _blocking(name: str) -> int:
    """How the runtime call `name` waits for the device: not, for all of it, or for one
    stream (a blocking copy waits for its own copy's stream)."""
    if any(s in name for s in _DEVICE_SYNCS):
        return DEVICE_SYNC
    if any(s in name for s in _STREAM_SYNCS):
        return STREAM_SYNC
    if name.startswith(_BLOCKING_COPIES) and _ASYNC not in name:
        return STREAM_SYNC
    return NO_SYNC


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
class DeviceTasks:
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
    # Each task's row in the trace's device tables, one after another (DEVICE_KINDS).
    order: np.ndarray


def _device_tasks(trace: Trace, durations: DeviceDurations | None) -> DeviceTasks:
    """Every device task of `trace`, its duration `durations`' where given."""
    kinds = [kind for kind in DEVICE_KINDS if kind in trace.tables]
    tables = [trace.table(kind) for kind in kinds]
    if not tables:
        empty = np.zeros(0, np.int64)
        return DeviceTasks(
            empty, np.zeros(0), np.zeros(0), np.zeros(0), empty, empty, empty, empty, empty
        )
    streams = np.concatenate([t.tid for t in tables])
    ts = np.concatenate([t.ts_us for t in tables])
    order = np.lexsort((ts, streams))
    traced = np.concatenate([t.dur_us for t in tables])[order]
    changed = _in_order(trace, durations, order) if durations is not None else traced.copy()
    names = np.concatenate([t.name for t in tables])[order]
    memory = np.concatenate(
        [np.full(len(t), k is not Kind.KERNEL) for k, t in zip(kinds, tables, strict=True)]
    )[order]
    return DeviceTasks(
        stream=streams[order],
        ts=ts[order],
        dur=changed.astype(np.float64),
        traced_dur=traced,
        correlation=np.concatenate([t.correlation for t in tables])[order],
        name=names,
        kind=name_types(trace)[names],
        memory=memory,
        order=order,
    )


def _in_order(trace: Trace, durations: DeviceDurations, order: np.ndarray) -> np.ndarray:
    """`durations` (the trace's own where a kind has none), in the device tasks' order."""
    kinds = [kind for kind in DEVICE_KINDS if kind in trace.tables]
    found = [durations.get(k, trace.table(k).dur_us) for k in kinds]
    return np.concatenate(found)[order].astype(np.float64)


def with_durations(graph: StepGraph, trace: Trace, durations: DeviceDurations | None) -> StepGraph:
    """`graph`, built unchanged from `trace` (`step_graph(trace)`), with its device tasks'
    durations `durations` instead (None: the traced ones): what `step_graph(trace,
    durations)` builds, without building the graph again. The two share all but the
    durations, which a joined replay changes (`replay.replay_graphs`)."""
    device = graph.device
    if durations is None:
        dur = device.traced_dur.astype(np.float64)
    else:
        dur = _in_order(trace, durations, device.order)
    return dataclasses.replace(graph, device=dataclasses.replace(device, dur=dur))


@dataclasses.dataclass
class StepGraph:
    """One rank's steps as a dependency graph (see the module's docstring), changed or
    not, ready to replay alone or joined with its run's other ranks (`replay_graphs`).
    It holds no function, so it travels between processes."""

    # Host tasks in traced order of start: thread, duration (µs), kind, device rows.
    threads: list[int]
    durations: list[float]
    blocking: list[int]  # NO_SYNC, DEVICE_SYNC or STREAM_SYNC
    launches: list[list[int]]  # the device tasks each call launches (rows of `device`)
    names: list[int]  # each host task's runtime call, by name id (-1: the host's own work)
    markers: dict[int, int]  # host task index → step number (-2 - N: the end of step N)
    first_start: dict[int, float]  # thread → its first task's traced start (µs)
    # Host task index → (the task on another thread that woke it, µs after that one's
    # end): for a task after an idle gap of its thread, in place of the gap.
    woken_by: dict[int, tuple[int, float]]
    device: DeviceTasks
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
    inserted = sorted(inserted, key=lambda x: x.at_us)  # one stream, in order
    device = _device_tasks(trace, durations)
    if inserted:
        # Correlations past every one the trace uses, host calls' included.
        used = [device.correlation]
        if Kind.RUNTIME in trace.tables:
            used.append(trace.table(Kind.RUNTIME).correlation)
        first = int(max(c.max(initial=0) for c in used)) + 1
        device = _with_inserted(device, inserted, len(trace.names) + 1, first)
    names = (*trace.names, HOST_WORK, INSERTED)
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
            _add(graph, tid, gap, blocking=NO_SYNC, launches=[])
        last_end[tid] = max(last_end.get(tid, ts), ts + dur)
        ends.setdefault(tid, []).append(ts + dur)
        tasks.setdefault(tid, []).append(len(graph.durations))
        if position in capture.zero:
            dur = 0.0
        if step != -1:
            graph.markers[len(graph.durations)] = step
            _add(graph, tid, 0.0, blocking=NO_SYNC, launches=[])
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


def _with_inserted(
    device: DeviceTasks, inserted: Sequence[Inserted], name: int, first: int
) -> DeviceTasks:
    """`device` with the `inserted` tasks after its rows, on a stream of their own (one
    past the trace's), with correlations from `first` on and the name id `name`."""
    n = len(inserted)
    stream = int(device.stream.max()) + 1 if len(device.stream) else 0
    return DeviceTasks(
        stream=np.r_[device.stream, np.full(n, stream, np.int64)],
        ts=np.r_[device.ts, [x.at_us for x in inserted]],
        dur=np.r_[device.dur, [x.duration_us for x in inserted]],
        traced_dur=np.r_[device.traced_dur, np.zeros(n)],
        correlation=np.r_[device.correlation, np.arange(first, first + n, dtype=np.int64)],
        name=np.r_[device.name, np.full(n, name, np.int64)],
        kind=np.r_[device.kind, np.full(n, COMMUNICATION, device.kind.dtype)],
        memory=np.r_[device.memory, np.zeros(n, bool)],
        order=device.order,
    )


@functools.lru_cache(maxsize=4096)
def _launches_graph(name: str) -> bool:
    """Whether the runtime call `name` launches a CUDA (or HIP) graph."""
    return "GraphLaunch" in name


def _graph_lags(device: DeviceTasks, rows: list[int], called_us: float) -> dict[int, float]:
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

    def __init__(self, device: DeviceTasks, traced: int) -> None:
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
        and _blocking(trace.names[rows[position][3]]) == NO_SYNC
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


HOST_WORK = "host work"  # the name of the host's own time between two runtime calls
INSERTED = "all-reduce (predicted)"  # the name of an inserted task and of its launch
