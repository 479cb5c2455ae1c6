"""Steps of a trace, and which step each event belongs to.

A step is a `ProfilerStep#N` annotation on the CPU; a trace without any is one step
spanning all its events. As in HolisticTraceAnalysis, a CPU event belongs to the
step its start lies in, and a device event to the step of the runtime call that
launched it (matched by `correlation`). A device event whose launch is not in the
trace (HTA leaves it out of every step) is placed by its own start instead.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lightspeed.trace.events import NO_ID, EventTable, FloatArray, IntArray, Kind, Trace
from lightspeed.trace.names import BoolArray, profiler_step

DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepWindow:
    """One step on the CPU timeline, in the trace's µs. `number` is N of ProfilerStep#N,
    None for a trace without steps (the window then spans every event)."""

    number: int | None
    start_us: float
    end_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


def step_windows(trace: Trace) -> list[StepWindow]:
    """The trace's ProfilerStep windows in time order (none when it has no steps)."""
    annotations = trace.table(Kind.ANNOTATION)
    windows = []
    for i in range(len(annotations)):
        number = profiler_step(trace.names[annotations.name[i]])
        if number is not None:
            start = float(annotations.ts_us[i])
            windows.append(
                StepWindow(
                    number=number, start_us=start, end_us=start + float(annotations.dur_us[i])
                )
            )
    return sorted(windows, key=lambda w: w.start_us)


def whole_window(trace: Trace) -> StepWindow:
    """One window over every event of the trace (`number` None)."""
    starts = [float(t.ts_us.min()) for t in trace.tables.values() if len(t)]
    ends = [float(t.end_us.max()) for t in trace.tables.values() if len(t)]
    if not starts:
        return StepWindow(number=None, start_us=0.0, end_us=0.0)
    return StepWindow(number=None, start_us=min(starts), end_us=max(ends))


def in_window(table: EventTable, window: StepWindow) -> IntArray:
    """The rows, ascending, of the events of `table` that start in `window`: [start,
    end), and for the whole-trace window its end too, where its last event may start."""
    return table.starting_in(window.start_us, window.end_us, until_hi=window.number is None)


def count_names(trace: Trace, names: IntArray) -> dict[str, int]:
    """How often each name id in `names` occurs, by name, in first-seen order."""
    ids, first, counts = np.unique(names, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return {trace.names[ids[i]]: int(counts[i]) for i in order}


def window_index(times_us: FloatArray, windows: list[StepWindow]) -> IntArray:
    """For each time, the index of the window [start, end) holding it, else -1."""
    if not windows:
        return np.full(len(times_us), -1, dtype=np.int64)
    starts = np.array([w.start_us for w in windows])
    ends = np.array([w.end_us for w in windows])
    index = np.searchsorted(starts, times_us, side="right") - 1
    inside = (index >= 0) & (times_us < ends[np.clip(index, 0, None)])
    return np.where(inside, index, -1)


def device_events(trace: Trace, with_stream_syncs: bool = False) -> EventTable:
    """Kernels, memory copies and memory sets, in one table; with `with_stream_syncs`,
    then the device's sync records on a stream (`Stream Sync`), which HTA counts as
    device events of type other."""
    tables = [trace.table(k) for k in DEVICE_KINDS]
    if with_stream_syncs:
        syncs = trace.table(Kind.SYNC)
        tables.append(syncs.rows(np.flatnonzero(syncs.tid >= 0)))
    return EventTable(
        **{
            f.name: np.concatenate([getattr(t, f.name) for t in tables])
            for f in dataclasses.fields(EventTable)
        }
    )


def correlate(keys: IntArray, table: EventTable) -> tuple[np.ndarray, IntArray]:
    """For each correlation id in `keys`: whether `table` has an event with that id, and
    the row of (one) such event (meaningless where there is none)."""
    order, ids = table.by_correlation
    if len(ids) == 0:
        return np.zeros(len(keys), dtype=bool), np.zeros(len(keys), dtype=np.int64)
    pos = np.clip(np.searchsorted(ids, keys), 0, len(ids) - 1)
    found = (keys != NO_ID) & (ids[pos] == keys)
    return found, order[pos]


def launch_times(trace: Trace, device: EventTable) -> FloatArray:
    """The start of the runtime call that launched each device event (NaN where none)."""
    runtime = trace.table(Kind.RUNTIME)
    if len(runtime) == 0:  # device events with no launch recorded
        return np.full(len(device), np.nan)
    found, rows = correlate(device.correlation, runtime)
    return np.where(found, runtime.ts_us[rows], np.nan)


def device_steps(
    device: EventTable, launches_us: FloatArray, windows: list[StepWindow]
) -> IntArray:
    """The window index of each device event: its launch's, else its own start's."""
    placed_at = np.where(np.isnan(launches_us), device.ts_us, launches_us)
    return window_index(placed_at, windows)


def rows_by_step(step_of: IntArray, count: int) -> list[IntArray]:
    """The rows, ascending, of the events of each of `count` steps, from each event's
    step index (`step_of`, -1: none): one sort for all of them."""
    order = np.argsort(step_of, kind="stable")
    bounds = np.searchsorted(step_of[order], np.arange(count + 1), side="left")
    return [order[bounds[i] : bounds[i + 1]] for i in range(count)]


def device_step_spans(
    device: EventTable, step_of: IntArray, count: int
) -> list[tuple[float, float] | None]:
    """Each of `count` steps' span on the device timeline, µs, no two overlapping: from
    its first device event's start (or the previous step's end, when later) to its last
    event's end; None for a step without device events. `step_of` is each device
    event's step index (-1: none).

    A device that lags its host is still running step N when step N+1's first copies
    start on another stream; spans taken from each step's own first and last events
    would then overlap and count that time twice, so step N+1 begins where N ended.
    """
    placed = step_of >= 0
    first = np.full(count, np.inf)
    last = np.full(count, -np.inf)
    np.minimum.at(first, step_of[placed], device.ts_us[placed])
    np.maximum.at(last, step_of[placed], device.end_us[placed])
    spans: list[tuple[float, float] | None] = []
    previous_end = -np.inf
    for i in range(count):
        if not np.isfinite(first[i]):
            spans.append(None)
            continue
        start = max(float(first[i]), previous_end)
        end = max(start, float(last[i]))
        spans.append((start, end))
        previous_end = end
    return spans


def inside_span(device: EventTable, span: tuple[float, float], rows: IntArray) -> BoolArray:
    """Which of the device events at `rows` have time inside `span` (or, lasting no
    time, lie in it)."""
    lo, hi = span
    start, end = device.ts_us[rows], device.end_us[rows]
    overlaps = (np.minimum(end, hi) - np.maximum(start, lo)) > 0
    return overlaps | ((start == end) & (start >= lo) & (start <= hi))


def inside_step_spans(
    device: EventTable, step_of: IntArray, spans: list[tuple[float, float] | None]
) -> IntArray:
    """`step_of` with -1 for each device event outside its step's span (`inside_span`,
    for every step at once; a step without a span keeps all its events)."""
    lo = np.array([np.nan if s is None else s[0] for s in spans] or [np.nan])
    hi = np.array([np.nan if s is None else s[1] for s in spans] or [np.nan])
    step = np.clip(step_of, 0, None)
    a, b = lo[step], hi[step]
    start, end = device.ts_us, device.end_us
    with np.errstate(invalid="ignore"):
        inside = ((np.minimum(end, b) - np.maximum(start, a)) > 0) | (
            (start == end) & (start >= a) & (start <= b)
        )
    cut = (step_of >= 0) & ~np.isnan(a) & ~inside
    return np.where(cut, -1, step_of)


def top_level(ops: EventTable) -> BoolArray:
    """Whether each CPU op runs inside no other op of the same thread."""
    if len(ops) == 0:
        return np.zeros(0, dtype=bool)
    # Sort by thread, then start, longest first, so a parent precedes what it holds.
    order = np.lexsort((-ops.dur_us, ops.ts_us, ops.tid))
    tid = ops.tid[order]
    start = ops.ts_us[order]
    end = ops.end_us[order]
    result = np.zeros(len(ops), dtype=bool)
    boundaries = np.flatnonzero(np.diff(tid)) + 1
    for lo, hi in zip(np.r_[0, boundaries], np.r_[boundaries, len(tid)], strict=True):
        reach = np.maximum.accumulate(end[lo:hi])
        outer = np.ones(hi - lo, dtype=bool)
        outer[1:] = start[lo + 1 : hi] >= reach[:-1]
        result[order[lo:hi]] = outer
    return result


def hta_whole_trace_window(
    trace: Trace, device: EventTable, include_last_step: bool = False
) -> tuple[StepWindow, BoolArray, bool]:
    """The whole-trace window as HolisticTraceAnalysis 0.5 counts it: its span, which
    device events it counts, and whether that left the last step out.

    As HTA's `_filter_irrelevant_gpu_kernels`: when the trace names two or more
    ProfilerSteps, a device event counts only if the host event that launched it
    (same `correlation`) starts before the last step begins (`include_last_step`:
    before it ends), so the last, often cut short, step is left out; a device event
    whose launch is not in the trace never counts. The host's side of the window ends
    there too. With fewer steps the window is the whole trace and every device event
    counts.
    """
    whole = whole_window(trace)
    cpu = [t for k, t in trace.tables.items() if k not in DEVICE_KINDS and k is not Kind.SYNC]
    step_name = np.array(["ProfilerStep" in n for n in trace.names], dtype=bool)
    marks = [t.name[step_name[t.name]] for t in cpu]
    if len(np.unique(np.concatenate(marks))) < 2:
        return whole, np.ones(len(device), dtype=bool), False
    starts = np.concatenate([t.ts_us[step_name[t.name]] for t in cpu])
    ends = np.concatenate([t.end_us[step_name[t.name]] for t in cpu])
    cut = float(ends.max()) if include_last_step else float(starts.max())
    launched: list[IntArray] = []
    for t in cpu:
        before = t.ts_us <= cut if include_last_step else t.ts_us < cut
        launched.append(t.correlation[before & (t.correlation != NO_ID)])
    kept = np.isin(device.correlation, np.concatenate(launched)) & (device.correlation != NO_ID)
    window = StepWindow(number=None, start_us=whole.start_us, end_us=min(whole.end_us, cut))
    return window, kept, not include_last_step
