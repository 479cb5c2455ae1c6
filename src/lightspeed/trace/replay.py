"""A GPU trace's steps replayed from their dependency graph (Daydream, ATC'20): the check
that the graph holds what decides each step's time, before any of it is changed.

The graph, from one rank's trace:

- **host tasks**: per CPU thread, its runtime calls (launches, copies, syncs) in order,
  with the time between two calls kept as a task of its own (the host's own work: the
  ops' Python and dispatch), and each `ProfilerStep#N` start as a marker of no duration;
- **device tasks**: kernels, copies and sets, per stream in the order they ran;
- **edges**: each thread's order; each stream's order; launch → its device task (by
  `correlation`: the task is ready when the call returns); and syncs: a call that blocks
  the host returns once the device work launched before it has ended: all of it for
  `cudaDeviceSynchronize` and `cudaEventSynchronize`, one stream's for
  `cudaStreamSynchronize` and a blocking `cudaMemcpy` (the stream of the thread's last
  launch: old traces do not name it).

The replay is a discrete-event simulation from durations and edges alone: no traced start
time is read but to order the tasks (a thread's calls, a stream's tasks) and to place each
thread's first task. A sync's duration comes from what it waits for; every other task
keeps its traced duration. Unchanged, the replay reproduces each traced step, which is
what `replay_steps` measures: a task shifted in the trace shifts nothing here.

What it leaves out, so far: waits of one stream on another's event (`cudaStreamWaitEvent`;
the stream waits only for its own order and its launches), the host threads' waits on
each other (other than through syncs), and collectives joined across ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lightspeed.trace.events import NO_ID, Kind, Trace
from lightspeed.trace.steps import DEVICE_KINDS, step_windows

__all__ = ["ReplayedStep", "StepReplay", "replay_steps"]

# Runtime calls that return only once device work launched before them has ended: the
# whole device's, or one stream's (old traces do not name it: the stream of the thread's
# last launch, where `.item()` and `.cpu()` put their copy before they wait).
_DEVICE_SYNCS = ("DeviceSynchronize", "EventSynchronize", "CtxSynchronize")
_STREAM_SYNCS = ("StreamSynchronize",)
_BLOCKING_COPIES = ("cudaMemcpy", "hipMemcpy")
_ASYNC = "Async"
_NONE, _DEVICE, _STREAM = 0, 1, 2


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


@dataclasses.dataclass
class _Graph:
    # Host tasks in traced order of start: thread, duration (µs), kind, device rows.
    threads: list[int]
    durations: list[float]
    blocking: list[int]  # _NONE, _DEVICE or _STREAM
    launches: list[list[int]]  # the device tasks each call launches (rows of `device`)
    markers: dict[int, int]  # host task index → step number
    first_start: dict[int, float]  # thread → its first task's traced start (µs)
    # Device tasks: stream, duration, and traced start and end (for the traced busy time).
    streams: np.ndarray
    device_dur: np.ndarray
    device_ts: np.ndarray


def _device_tasks(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every device task of the trace: stream, start, duration, correlation, in order."""
    tables = [trace.table(kind) for kind in DEVICE_KINDS if kind in trace.tables]
    streams = np.concatenate([t.tid for t in tables]) if tables else np.zeros(0, np.int64)
    ts = np.concatenate([t.ts_us for t in tables]) if tables else np.zeros(0)
    dur = np.concatenate([t.dur_us for t in tables]) if tables else np.zeros(0)
    corr = np.concatenate([t.correlation for t in tables]) if tables else np.zeros(0, np.int64)
    order = np.lexsort((ts, streams))
    return streams[order], ts[order], dur[order], corr[order]


def _graph(trace: Trace) -> _Graph:
    streams, device_ts, device_dur, device_corr = _device_tasks(trace)
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
        annotations = trace.table(Kind.ANNOTATION)
        main = _step_thread(trace)
        for w in windows:
            assert w.number is not None
            rows.append((w.start_us, 0.0, main, "", NO_ID, w.number))
            rows.append((w.end_us, 0.0, main, "", NO_ID, -2 - w.number))
        del annotations
    rows.sort(key=lambda r: (r[0], r[5] < 0))
    graph = _Graph([], [], [], [], {}, {}, streams, device_dur, device_ts)
    last_end: dict[int, float] = {}
    for ts, dur, tid, name, corr, step in rows:
        if tid not in last_end:
            graph.first_start[tid] = ts
        else:
            gap = ts - last_end[tid]
            if gap > 0:
                _add(graph, tid, gap, blocking=_NONE, launches=[])
        last_end[tid] = max(last_end.get(tid, ts), ts + dur)
        if step != -1:
            graph.markers[len(graph.durations)] = step
            _add(graph, tid, 0.0, blocking=_NONE, launches=[])
            continue
        _add(graph, tid, dur, blocking=_blocking(name), launches=by_correlation.get(corr, []))
    return graph


def _add(graph: _Graph, tid: int, dur: float, *, blocking: int, launches: list[int]) -> None:
    graph.threads.append(tid)
    graph.durations.append(dur)
    graph.blocking.append(blocking)
    graph.launches.append(launches)


def _step_thread(trace: Trace) -> int:
    """The thread the ProfilerStep annotations are on."""
    annotations = trace.table(Kind.ANNOTATION)
    for i in range(len(annotations)):
        if trace.names[annotations.name[i]].startswith("ProfilerStep#"):
            return int(annotations.tid[i])
    return 0


def _simulate(graph: _Graph) -> tuple[list[float], np.ndarray, np.ndarray]:
    """Each host task's replayed start, and each device task's replayed start and end
    (µs), from the graph's durations and edges."""
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

    # A device task whose launch is not in the trace (launched before it began) is ready
    # from the start, in its stream's order.
    launched = {row for rows in graph.launches for row in rows}
    for row in range(len(graph.device_dur)):
        if row not in launched:
            pending[row] = -np.inf
    for stream in streams_rows:
        release(stream)
    last_stream: dict[int, int] = {}  # thread → the stream of its last launch
    for index, tid in enumerate(graph.threads):
        start = clock.get(tid, graph.first_start[tid])
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
    return host_start, device_start, device_end


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


def replay_steps(trace: Trace) -> StepReplay:
    """Replay `trace`'s steps from its dependency graph, unchanged (see the module's
    docstring): each `ProfilerStep#N` but the last, its traced and replayed duration and
    device busy time."""
    graph = _graph(trace)
    host_start, device_start, device_end = _simulate(graph)
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for index, number in graph.markers.items():
        if number >= 0:
            starts[number] = host_start[index]
        else:
            ends[-2 - number] = host_start[index]
    traced_ts = graph.device_ts
    traced_end = traced_ts + graph.device_dur
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
            )
        )
    return StepReplay(
        steps=tuple(steps),
        host_tasks=len(graph.durations),
        device_tasks=len(graph.device_dur),
        syncs=sum(1 for b in graph.blocking if b != _NONE),
    )


def summary(replays: Sequence[ReplayedStep]) -> tuple[float, float]:
    """The largest and the median |error| of the replayed steps' durations."""
    errors = sorted(abs(s.error) for s in replays)
    if not errors:
        return 0.0, 0.0
    return errors[-1], float(np.median(errors))
