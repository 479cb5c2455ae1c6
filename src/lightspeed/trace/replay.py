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
  launch: old traces do not name it); and wake-ups: a thread other than the steps' that
  waited, no op of its own running (the autograd engine's between two backward passes),
  goes on after the task of another thread that ended last before it, not after its gap.

The replay is a discrete-event simulation from durations and edges alone: no traced start
time is read but to order the tasks (a thread's calls, a stream's tasks), to place each
thread's first task, and for a device task whose launch the trace did not record (no edge
says when it could start). A sync's duration comes from what it waits for; every other task
keeps its traced duration. Unchanged, the replay reproduces each traced step, which is
what `replay_steps` measures: a task shifted in the trace shifts nothing here.

Changed (`replay_steps`' arguments): the device tasks' durations, and each step's device
work captured as one CUDA graph; `trace.whatif` makes the changes.

What it leaves out, so far: waits of one stream on another's event (`cudaStreamWaitEvent`;
the stream waits only for its own order and its launches), the steps' thread waiting for
another (`loss.backward()` for the autograd engine's), and collectives joined across
ranks.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from lightspeed.trace.events import NO_ID, FloatArray, Kind, Trace
from lightspeed.trace.names import KernelType, kernel_type
from lightspeed.trace.steps import DEVICE_KINDS, StepWindow, step_windows

__all__ = [
    "DeviceDurations",
    "ReplayedStep",
    "StepReplay",
    "replay_ranks",
    "replay_steps",
    "step_timeline",
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
    and the graph's size."""

    steps: tuple[ReplayedStep, ...]
    host_tasks: int
    device_tasks: int
    syncs: int
    # The device time of the steps' tasks (their launches in the steps above), seconds,
    # by stream ("stream 7") and by kind (computation, communication, memory, other).
    device_time_s: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Graph:
    # Host tasks in traced order of start: thread, duration (µs), kind, device rows.
    threads: list[int]
    durations: list[float]
    blocking: list[int]  # _NONE, _DEVICE or _STREAM
    launches: list[list[int]]  # the device tasks each call launches (rows of `device`)
    names: list[str]  # each host task's runtime call ("" for the host's own work)
    markers: dict[int, int]  # host task index → step number
    first_start: dict[int, float]  # thread → its first task's traced start (µs)
    # Host task index → (the task on another thread that woke it, µs after that one's
    # end): for a task after an idle gap of its thread, in place of the gap.
    woken_by: dict[int, tuple[int, float]]
    # Device tasks: stream, duration, and traced start and end (for the traced busy time).
    streams: np.ndarray
    device_dur: np.ndarray
    device_ts: np.ndarray
    # The device tasks' traced durations, whatever `device_dur` was changed to.
    device_traced_dur: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    # Per device task, the step number of the call that launched it (-1: none).
    device_step: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


def _device_tasks(
    trace: Trace, durations: DeviceDurations | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every device task of the trace: stream, start, duration (`durations`' where given),
    correlation, in each stream's order."""
    kinds = [kind for kind in DEVICE_KINDS if kind in trace.tables]
    tables = [trace.table(kind) for kind in kinds]
    streams = np.concatenate([t.tid for t in tables]) if tables else np.zeros(0, np.int64)
    ts = np.concatenate([t.ts_us for t in tables]) if tables else np.zeros(0)
    dur = (
        np.concatenate([durations.get(k, t.dur_us) for k, t in zip(kinds, tables, strict=True)])
        if tables and durations is not None
        else np.concatenate([t.dur_us for t in tables])
        if tables
        else np.zeros(0)
    )
    corr = np.concatenate([t.correlation for t in tables]) if tables else np.zeros(0, np.int64)
    order = np.lexsort((ts, streams))
    return streams[order], ts[order], dur[order], corr[order]


def _device_names(trace: Trace) -> list[str]:
    """Every device task's name, in `_device_tasks`' order."""
    tables = [trace.table(kind) for kind in DEVICE_KINDS if kind in trace.tables]
    if not tables:
        return []
    streams = np.concatenate([t.tid for t in tables])
    ts = np.concatenate([t.ts_us for t in tables])
    names = np.concatenate([t.name for t in tables])
    return [trace.names[n] for n in names[np.lexsort((ts, streams))].tolist()]


def _graph(
    trace: Trace, durations: DeviceDurations | None, graphs: bool, fused_optimizer: bool = False
) -> _Graph:
    streams, device_ts, device_dur, device_corr = _device_tasks(trace, durations)
    by_correlation: dict[int, list[int]] = {}
    for row, corr in enumerate(device_corr.tolist()):
        if corr != NO_ID:
            by_correlation.setdefault(corr, []).append(row)
    runtime = trace.table(Kind.RUNTIME) if Kind.RUNTIME in trace.tables else None
    rows: list[tuple[float, float, int, str, int, int]] = []  # ts, dur, tid, name, corr, step
    if runtime is not None:
        for i in range(len(runtime)):
            rows.append(
                (
                    float(runtime.ts_us[i]),
                    float(runtime.dur_us[i]),
                    int(runtime.tid[i]),
                    trace.names[runtime.name[i]],
                    int(runtime.correlation[i]),
                    -1,
                )
            )
    windows = step_windows(trace)
    if windows:
        main = _step_thread(trace)
        for w in windows:
            assert w.number is not None
            rows.append((w.start_us, 0.0, main, "", NO_ID, w.number))
            rows.append((w.end_us, 0.0, main, "", NO_ID, -2 - w.number))
    rows.sort(key=lambda r: (r[0], r[5] < 0))
    main = _step_thread(trace) if windows else 0
    capture = (
        _captured(rows, windows, by_correlation, main) if graphs else _Capture({}, set(), set())
    )
    if fused_optimizer:
        fused_rows, fused_zero = _fused_optimizer(trace, rows, by_correlation)
        capture.zero.update(fused_zero)
        device_dur = device_dur.copy()
        for first, others in fused_rows:
            device_dur[first] = FUSED_ADAMW_SHARE * float(device_dur[[first, *others]].sum())
            device_dur[others] = 0.0
    graph = _Graph([], [], [], [], [], {}, {}, {}, streams, device_dur, device_ts)
    graph.device_step = np.full(len(device_dur), -1, dtype=np.int64)
    graph.device_traced_dur = _device_tasks(trace, None)[2] if durations else device_dur.copy()
    numbers = np.array([-1 if w.number is None else w.number for w in windows], dtype=np.int64)
    window_starts = [w.start_us for w in windows]
    window_ends = [w.end_us for w in windows]
    last_end: dict[int, float] = {}
    busy = _cpu_spans(trace)
    # Per thread, the traced ends of its tasks so far and their indices, in order.
    ends: dict[int, list[float]] = {}
    tasks: dict[int, list[int]] = {}
    for position, (ts, dur, tid, name, corr, step) in enumerate(rows):
        gap = ts - last_end[tid] if tid in last_end else 0.0
        idle = tid != main and (
            tid not in last_end or not _covered(busy.get(tid), last_end[tid], ts)
        )
        waker = _waker(ends, tasks, tid, ts) if idle else None
        if waker is not None:
            graph.woken_by[len(graph.durations)] = (waker[0], ts - waker[1])
        elif tid not in last_end:
            graph.first_start[tid] = ts
        elif position not in capture.zero and gap > 0:
            _add(graph, tid, gap, blocking=_NONE, launches=[])
        if tid not in last_end and waker is not None:
            graph.first_start[tid] = ts
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
        _add(graph, tid, dur, blocking=_blocking(name), launches=launched, name=name)
        if launched and windows:
            at = bisect.bisect_right(window_starts, ts) - 1
            if at >= 0 and ts < window_ends[at]:
                graph.device_step[launched] = numbers[at]
    return graph


# A fused AdamW reads a parameter, its gradient and both moments once and writes the
# parameter and the moments once: 7 accesses an element. The multi-tensor (foreach) AdamW
# makes 20 (12 reads, 8 writes over its 8 passes: weight decay, lerp, mul, addcmul, sqrt,
# div, add, addcdiv), as does one parameter at a time. Its kernels, memory-bound, are
# taken at the same share of the bandwidth fused as not.
FUSED_ADAMW_SHARE = 7 / 20
_OPTIMIZER_STEP = "Optimizer.step#"


def _fused_optimizer(
    trace: Trace,
    rows: Sequence[tuple[float, float, int, str, int, int]],
    by_correlation: dict[int, list[int]],
) -> tuple[list[tuple[int, list[int]]], set[int]]:
    """Each `Optimizer.step#…` span's update as one fused pass: per span, its first
    device task and the others it replaces, and the host rows that then take no time
    (from the span's first launch to its last on its thread, as one launch stands for
    them all)."""
    annotations = trace.table(Kind.ANNOTATION) if Kind.ANNOTATION in trace.tables else None
    if annotations is None:
        return [], set()
    spans = [
        (float(annotations.ts_us[i]), float(annotations.ts_us[i] + annotations.dur_us[i]),
         int(annotations.tid[i]))
        for i in range(len(annotations))
        if trace.names[annotations.name[i]].startswith(_OPTIMIZER_STEP)
    ]  # fmt: skip
    fused: list[tuple[int, list[int]]] = []
    zero: set[int] = set()
    for lo, hi, tid in spans:
        launches = [
            p
            for p, (ts, _, t, _, corr, step) in enumerate(rows)
            if t == tid and step == -1 and lo <= ts < hi and corr in by_correlation
        ]
        if not launches:
            continue
        device = [r for p in launches for r in by_correlation[rows[p][4]]]
        fused.append((device[0], device[1:]))
        for position in range(launches[0] + 1, launches[-1] + 1):
            row = rows[position]
            if row[2] == tid and row[5] == -1 and _blocking(row[3]) == _NONE:
                zero.add(position)
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
    rows: Sequence[tuple[float, float, int, str, int, int]],
    windows: Sequence[StepWindow],
    by_correlation: dict[int, list[int]],
    main: int,
) -> _Capture:
    """What capturing each step's device work as one CUDA graph changes (`_Capture`).
    On the step's thread (`main`), from its first launch to its last, the host's work
    and the launches take no time: the graph runs none of the host's code in between.
    Syncs, and everything outside those spans, stay."""
    capture = _Capture({}, set(), set())
    if not windows:
        return capture
    starts = np.array([w.start_us for w in windows])
    ends = np.array([w.end_us for w in windows])
    launches: dict[int, list[int]] = {}  # step → positions of its launches, any thread
    for position, (ts, _, _, _, corr, step) in enumerate(rows):
        if step == -1 and corr in by_correlation:
            i = int(np.searchsorted(starts, ts, side="right")) - 1
            if i >= 0 and ts < ends[i]:
                launches.setdefault(i, []).append(position)
    for positions in launches.values():
        first = positions[0]
        capture.graph_launch[first] = [r for p in positions for r in by_correlation[rows[p][4]]]
        capture.launched_in_graph.update(positions[1:])
        on_main = [p for p in positions if rows[p][2] == main]
        if not on_main:
            continue
        for position in range(on_main[0] + 1, on_main[-1] + 1):
            row = rows[position]
            if row[2] == main and row[5] == -1 and _blocking(row[3]) == _NONE:
                capture.zero.add(position)
    return capture


def _add(
    graph: _Graph, tid: int, dur: float, *, blocking: int, launches: list[int], name: str = ""
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


def _simulate(graph: _Graph) -> tuple[list[float], list[float], np.ndarray, np.ndarray]:
    """Each host task's replayed start and end, and each device task's replayed start
    and end (µs), from the graph's durations and edges."""
    clock: dict[int, float] = {}
    stream_free: dict[int, float] = {}
    # A stream's tasks run in their traced order: a task waits for the one before it.
    order_in_stream: dict[int, int] = {}
    device_start = np.full(len(graph.device_dur), np.nan)
    device_end = np.full(len(graph.device_dur), np.nan)
    pending: dict[int, float] = {}  # device row → the time its launch returned
    host_start: list[float] = []
    launched_end = 0.0  # the latest end of every device task launched so far

    def run_device(row: int, ready: float) -> float:
        stream = int(graph.streams[row])
        start = max(ready, stream_free.get(stream, -np.inf))
        if not np.isfinite(start):  # launched before the trace, first on its stream
            start = float(graph.device_ts[row])
        end = start + float(graph.device_dur[row])
        stream_free[stream] = end
        device_start[row], device_end[row] = start, end
        return end

    streams_rows: dict[int, list[int]] = {}
    for row, stream in enumerate(graph.streams.tolist()):
        streams_rows.setdefault(stream, []).append(row)

    def release(stream: int) -> float:
        """Run the stream's tasks whose launches have returned, in the stream's order."""
        nonlocal launched_end
        rows = streams_rows[stream]
        i = order_in_stream.get(stream, 0)
        while i < len(rows) and rows[i] in pending:
            launched_end = max(launched_end, run_device(rows[i], pending.pop(rows[i])))
            i += 1
        order_in_stream[stream] = i
        return launched_end

    # A device task whose launch is not in the trace (launched before the profiler
    # started, or by a call it did not record) has no edge to say when it could start:
    # its traced start stands for that, the one traced start the replay reads.
    launched = {row for rows in graph.launches for row in rows}
    for row in range(len(graph.device_dur)):
        if row not in launched:
            pending[row] = float(graph.device_ts[row])
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
            pending[row] = end
            last_stream[tid] = int(graph.streams[row])
            release(last_stream[tid])
        if blocking == _DEVICE or (blocking == _STREAM and tid not in last_stream):
            end = max(end, launched_end)
        elif blocking == _STREAM:
            end = max(end, stream_free.get(last_stream[tid], end))
        clock[tid] = end
        host_end.append(end)
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


def replay_steps(
    trace: Trace,
    durations: DeviceDurations | None = None,
    *,
    graphs: bool = False,
    fused_optimizer: bool = False,
) -> StepReplay:
    """Replay `trace`'s steps from its dependency graph (see the module's docstring):
    each `ProfilerStep#N` but the last, its traced and replayed duration and device busy
    time. Unchanged by default; `durations` (µs, per device-event kind, row for row of
    the trace's tables) replaces the device tasks' durations, and `graphs` captures each
    step's device work as one CUDA graph (`_captured`), and `fused_optimizer` each
    optimizer step's update as one fused pass (`_fused_optimizer`)."""
    graph = _graph(trace, durations, graphs, fused_optimizer)
    return _replayed(trace, graph, _simulate(graph))


def _replayed(
    trace: Trace, graph: _Graph, simulated: tuple[list[float], list[float], np.ndarray, np.ndarray]
) -> StepReplay:
    """The steps of `trace` from its graph's simulation (`_simulate`)."""
    host_start, _, device_start, device_end = simulated
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for index, number in graph.markers.items():
        if number >= 0:
            starts[number] = host_start[index]
        else:
            ends[-2 - number] = host_start[index]
    traced_ts = graph.device_ts
    traced_end = traced_ts + graph.device_traced_dur
    steps = []
    windows = step_windows(trace)
    for w in windows[:-1]:
        assert w.number is not None
        if w.number not in starts or w.number not in ends:
            continue
        lo, hi = starts[w.number], ends[w.number]
        steps.append(
            ReplayedStep(
                number=w.number,
                traced_s=w.duration_us * 1e-6,
                replayed_s=(hi - lo) * 1e-6,
                traced_busy_s=_busy(traced_ts, traced_end, w.start_us, w.end_us) * 1e-6,
                replayed_busy_s=_busy(device_start, device_end, lo, hi) * 1e-6,
                device_span_s=_span(device_start, device_end, graph.device_step == w.number),
            )
        )
    return StepReplay(
        steps=tuple(steps),
        host_tasks=len(graph.durations),
        device_tasks=len(graph.device_dur),
        syncs=sum(1 for b in graph.blocking if b != _NONE),
        device_time_s=_device_time(trace, graph, [s.number for s in steps]),
    )


def _device_time(trace: Trace, graph: _Graph, numbers: list[int]) -> dict[str, float]:
    """The device time (s) of the tasks launched in the steps `numbers`, by kind, then
    by stream."""
    mine = np.isin(graph.device_step, numbers)
    if not mine.any():
        return {}
    names = _device_names(trace)
    kind_of = {n: kernel_type(n).value for n in set(names)}  # a trace repeats few names
    kinds = np.array([kind_of[n] for n in names]) if names else np.zeros(0, str)
    out: dict[str, float] = {}
    for kind in KernelType:
        seconds = float(graph.device_dur[mine & (kinds == kind.value)].sum()) * 1e-6
        if seconds > 0:
            out[kind.value] = seconds
    for stream in np.unique(graph.streams[mine]).tolist():
        out[f"stream {stream}"] = (
            float(graph.device_dur[mine & (graph.streams == stream)].sum()) * 1e-6
        )
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
) -> list[StepReplay]:
    """The ranks of one run replayed together, their collectives joined (see
    `trace.collectives`: the k-th kernel of a name in a step is the same collective on
    every rank). A collective's transfer is its shortest kernel across the ranks (the
    last to arrive waits for no one), divided by `comm_speedup`; on every rank it ends
    at the last rank's arrival plus the transfer. The ranks' clocks are aligned on their
    first joined collective's traced end, which is one instant on every rank. Each rank
    otherwise as `replay_steps` replays it, with `durations[r]` and `graphs`."""
    if not traces:
        return []
    per_rank = list(durations) if durations is not None else [None] * len(traces)
    built = [_graph(t, d, graphs, fused_optimizer) for t, d in zip(traces, per_rank, strict=True)]
    keys = [_collective_keys(t, g) for t, g in zip(traces, built, strict=True)]
    joined = set.intersection(*(set(k) for k in keys)) if len(keys) > 1 else set()
    if not joined:
        return [_replayed(t, g, _simulate(g)) for t, g in zip(traces, built, strict=True)]
    transfer = {
        k: min(float(g.device_dur[ks[k]]) for g, ks in zip(built, keys, strict=True))
        for k in joined
    }
    first = min(joined, key=lambda k: float(built[0].device_ts[keys[0][k]]))
    ends = [
        float(g.device_ts[ks[first]] + g.device_traced_dur[ks[first]])
        for g, ks in zip(built, keys, strict=True)
    ]
    offsets = [end - ends[0] for end in ends]  # a rank's clock less rank 0's
    for g, ks in zip(built, keys, strict=True):
        for k in joined:
            g.device_dur[ks[k]] = transfer[k] / comm_speedup
    simulated = [_simulate(g) for g in built]
    for _ in range(_JOIN_ROUNDS):
        arrivals = {
            k: [
                float(sim[2][ks[k]]) - off
                for sim, ks, off in zip(simulated, keys, offsets, strict=True)
            ]
            for k in joined
        }
        moved = 0.0
        for r, (g, ks) in enumerate(zip(built, keys, strict=True)):
            for k in joined:
                wait = max(arrivals[k]) - arrivals[k][r]
                new = transfer[k] / comm_speedup + wait
                moved = max(moved, abs(new - float(g.device_dur[ks[k]])))
                g.device_dur[ks[k]] = new
        simulated = [_simulate(g) for g in built]
        if moved <= _JOIN_TOLERANCE_US:
            break
    return [_replayed(t, g, sim) for t, g, sim in zip(traces, built, simulated, strict=True)]


def _collective_keys(trace: Trace, graph: _Graph) -> dict[tuple[int, str, int], int]:
    """Each communication kernel of `trace`'s steps, by (step, name, occurrence of that
    name in the step): its device-task row in `graph`."""
    names = _device_names(trace)
    seen: dict[tuple[int, str], int] = {}
    keys: dict[tuple[int, str, int], int] = {}
    order = np.argsort(graph.device_ts, kind="stable")
    communicates = {n: kernel_type(n) is KernelType.COMMUNICATION for n in set(names)}
    for row in order.tolist():
        step = int(graph.device_step[row])
        name = names[row]
        if step < 0 or not communicates[name]:
            continue
        n = seen.get((step, name), 0)
        seen[step, name] = n + 1
        keys[step, name, n] = row
    return keys


def _span(starts: np.ndarray, ends: np.ndarray, mine: np.ndarray) -> float:
    """Seconds from the first start to the last end of the tasks in `mine` (0: none)."""
    keep = mine & np.isfinite(starts)
    if not keep.any():
        return 0.0
    return float(ends[keep].max() - starts[keep].min()) * 1e-6


def summary(replays: Sequence[ReplayedStep]) -> tuple[float, float]:
    """The largest and the median |error| of the replayed steps' durations."""
    errors = sorted(abs(s.error) for s in replays)
    if not errors:
        return 0.0, 0.0
    return errors[-1], float(np.median(errors))


# At most this many events a timeline draws: the longest, the rest summed in the caption.
TIMELINE_EVENTS = 4000


def step_timeline(
    trace: Trace,
    durations: DeviceDurations | None = None,
    *,
    graphs: bool = False,
    fused_optimizer: bool = False,
    limit: int = TIMELINE_EVENTS,
) -> dict[str, object] | None:
    """The first whole step of `trace` as replayed (changed as `replay_steps` changes
    it): a lane per host thread and device stream, each task an event (seconds from the
    step's start), in the layout `lightspeed trace`'s timeline uses; None without steps."""
    windows = step_windows(trace)
    if len(windows) < 2:
        return None
    graph = _graph(trace, durations, graphs, fused_optimizer)
    host_start, host_end, device_start, device_end = _simulate(graph)
    number = windows[0].number
    marks = {n: i for i, n in graph.markers.items()}
    if number is None or number not in marks or -2 - number not in marks:
        return None
    lo, hi = host_start[marks[number]], host_start[marks[-2 - number]]
    hi = max(hi, lo + _span(device_start, device_end, graph.device_step == number) * 1e6)
    events: list[tuple[str, float, float, str, str]] = []  # lane, start, end, name, category
    for i, tid in enumerate(graph.threads):
        a, b = host_start[i], host_end[i]
        if b > a and a < hi and b > lo:
            name = graph.names[i] or "host work"
            category = "sync" if graph.blocking[i] != _NONE else "cpu-op"
            events.append((f"thread {tid}", a, b, name, category))
    names = _device_names(trace)
    for row in range(len(graph.device_dur)):
        a, b = float(device_start[row]), float(device_end[row])
        if np.isfinite(a) and b > a and a < hi and b > lo:
            name = names[row]
            category = (
                "collective"
                if name.startswith("nccl")
                else "memory"
                if name.startswith(("Memcpy", "Memset"))
                else "kernel"
            )
            events.append((f"stream {int(graph.streams[row])}", a, b, name, category))
    total = len(events)
    if total > limit:
        events = sorted(events, key=lambda e: e[2] - e[1], reverse=True)[:limit]
    lanes = sorted({e[0] for e in events}, key=lambda n: (n.startswith("stream"), n))
    lane_of = {name: i for i, name in enumerate(lanes)}
    return {
        "step": number,
        "duration_s": (hi - lo) * 1e-6,
        "events_in_window": total,
        "events_kept": len(events),
        "lanes": [{"name": name} for name in lanes],
        "events": {
            "lane": [lane_of[e[0]] for e in events],
            "start_s": [(max(e[1], lo) - lo) * 1e-6 for e in events],
            "duration_s": [(min(e[2], hi) - max(e[1], lo)) * 1e-6 for e in events],
            "name": [e[3] for e in events],
            "category": [e[4] for e in events],
        },
    }
