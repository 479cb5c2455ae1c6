"""A GPU trace's steps replayed from their dependency graph (`trace.dependency`; Daydream,
ATC'20): the check that the graph holds what decides each step's time, before any of it
is changed, and the run of a changed one.

The replay is a discrete-event simulation from durations and edges alone: no traced start
time is read but to order the tasks (a thread's calls, a stream's tasks), to place each
thread's first task, to tell which task a stream's wait was for, and for a device task whose
launch the trace did not record (no edge says when it could start). A sync's duration comes
from what it waits for; every other task keeps its traced duration. Unchanged, the replay
reproduces each traced step, which is what `replay_steps` measures: a task shifted in the
trace shifts nothing here.

Changed (`replay_steps`' arguments, made in the graph: `dependency.step_graph`): the device
tasks' durations, each step's device work captured as one CUDA graph, each optimizer step's
update as one fused pass, device tasks inserted; one run's ranks replayed together, their
collectives joined (`replay_ranks`, `replay_graphs`). `trace.whatif` makes the changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lightspeed.trace.dependency import (
    COMMUNICATION,
    DEVICE_SYNC,
    MEMORY,
    NO_SYNC,
    STREAM_SYNC,
    DeviceDurations,
    Inserted,
    StepGraph,
    step_graph,
)
from lightspeed.trace.downsample import Blocks
from lightspeed.trace.events import Trace
from lightspeed.trace.names import KERNEL_TYPES
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
        end = start + (graph.durations[index] if blocking == NO_SYNC else 0.0)
        for row in graph.launches[index]:
            pending[row] = start if row in lags else end
            last_stream[tid] = int(device.stream[row])
            release(last_stream[tid])
        if blocking == DEVICE_SYNC or (blocking == STREAM_SYNC and tid not in last_stream):
            end = max(end, launched_end)
        elif blocking == STREAM_SYNC:
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
    step's device work as one CUDA graph, `fused_optimizer` runs each optimizer step's
    update as one fused pass, and `inserted` adds device tasks (`dependency.step_graph`).
    `timeline`: the first step's timeline too (`StepReplay.timeline`)."""
    (replayed,) = replay_graphs(
        [step_graph(trace, durations, graphs=graphs, fused_optimizer=fused_optimizer,
                    inserted=inserted)],
        timeline=timeline,
    )  # fmt: skip
    return replayed


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
        syncs=sum(1 for b in graph.blocking if b != NO_SYNC),
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
        if step < 0 or device.kind[row] != COMMUNICATION:
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
        device.kind[on_device] == COMMUNICATION,
        _CODE[Category.COLLECTIVE],
        np.where(
            device.memory[on_device] | (device.kind[on_device] == MEMORY),
            _CODE[Category.MEMORY],
            _CODE[Category.KERNEL],
        ),
    )
    # The host's own work is named by one id past the trace's names (`HOST_WORK`).
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
                np.array(graph.blocking)[host] != NO_SYNC,
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
