"""What every window analysis of a trace is given, and what it declares.

A `WindowAnalyzer` is one analysis of one window (a ProfilerStep, or the whole trace):
a function from a `WindowContext` to its result, how that result is written in JSON
(`data`, under `key`) and what a report shows of it (`describe`: rows of the window's
summary, and blocks such as tables). `trace.analysis.WINDOW_ANALYZERS` lists them;
adding an analysis is a module that defines its analyzer and one line there.

The context works out what several analyses share once per trace (device events,
their launches and types, the union of device time) and keeps any other per-trace
index an analysis asks for with `TraceContext.once`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from lightspeed.document import Block, Line
from lightspeed.trace import intervals
from lightspeed.trace.events import EventTable, FloatArray, IntArray, Trace
from lightspeed.trace.names import KERNEL_TYPES, BoolArray, KernelType, name_types
from lightspeed.trace.packed import Column, dumps
from lightspeed.trace.steps import (
    DEVICE_KINDS,
    StepWindow,
    device_events,
    inside_span,
    launch_times,
)

R = TypeVar("R")
T = TypeVar("T")

# What an analysis shows of its result: a row of the window's summary, or a block.
Row = tuple[str, Line]
Shown = Sequence[Row | Block]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceEvents:
    """The device events of one window: times in µs, HTA type index, device, stream,
    launch start (NaN when unknown), and name id."""

    start_us: FloatArray
    end_us: FloatArray
    type: IntArray
    device: IntArray
    stream: IntArray
    launch_us: FloatArray
    name: IntArray

    def is_type(self, kernel_type: KernelType) -> BoolArray:
        return self.type == KERNEL_TYPES.index(kernel_type)

    def of_type(self, kernel_type: KernelType) -> tuple[FloatArray, FloatArray]:
        mask = self.is_type(kernel_type)
        return self.start_us[mask], self.end_us[mask]


class TraceContext:
    """One rank's trace and what its window analyses share, each worked out on first use."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._memo: dict[Callable[[TraceContext], Any], Any] = {}

    @functools.cached_property
    def device(self) -> EventTable:
        """Kernels, memory copies and sets, then the device's stream syncs (which only
        the HTA-equal whole-trace window counts; see `work`)."""
        return device_events(self.trace, with_stream_syncs=True)

    @functools.cached_property
    def work(self) -> BoolArray:
        """Which device events are work (kernels, copies, sets), not sync records."""
        work_rows = sum(len(self.trace.table(k)) for k in DEVICE_KINDS)
        return np.arange(len(self.device)) < work_rows

    @functools.cached_property
    def whole_microseconds(self) -> bool:
        """Whether every time in the trace is a whole number of µs. HTA rounds the times
        of a trace that has fractional ones (start up, end down) before its analyses."""
        return all(bool(np.all(t.ts_us == np.floor(t.ts_us))) for t in self.trace.tables.values())

    @functools.cached_property
    def launches_us(self) -> FloatArray:
        """The start of the runtime call that launched each device event (NaN: none)."""
        return launch_times(self.trace, self.device)

    @functools.cached_property
    def types(self) -> IntArray:
        """The kernel type index of every name of the trace."""
        return name_types(self.trace)

    @functools.cached_property
    def busy(self) -> tuple[FloatArray, FloatArray]:
        """The union of all the device's work, µs."""
        work = self.work
        return intervals.union(self.device.ts_us[work], self.device.end_us[work])

    def once(self, build: Callable[[TraceContext], T]) -> T:
        """`build(self)`, computed once per trace (an analysis's own index)."""
        if build not in self._memo:
            self._memo[build] = build(self)
        result: T = self._memo[build]
        return result


class WindowContext:
    """One window of a trace: its StepWindow and which device events belong to it."""

    def __init__(
        self,
        trace: TraceContext,
        window: StepWindow,
        rows: IntArray,
        hta_times: bool = False,
        device_span_us: tuple[float, float] | None = None,
        *,
        inside: bool = False,
    ) -> None:
        self.trace = trace
        self.window = window
        # A step's device events are cut to its span on the device timeline
        # (`steps.device_step_spans`), so that no two steps count the same device time.
        self.device_span_us = device_span_us
        if device_span_us is not None and not inside:  # `inside`: already cut to it
            rows = rows[inside_span(trace.device, device_span_us, rows)]
        # The rows of the trace's device events (`TraceContext.device`) in the window,
        # ascending: an index, so a window costs what it holds, not the whole trace.
        self.rows = rows
        # HTA-equal figures: the times HTA analyses, rounded to whole µs as it does.
        self.rounded = hta_times and not trace.whole_microseconds

    @functools.cached_property
    def events(self) -> DeviceEvents:
        """The window's device events."""
        device, rows = self.trace.device, self.rows
        start, end, launch = device.ts_us[rows], device.end_us[rows], self.trace.launches_us[rows]
        if self.device_span_us is not None:
            start, end = np.clip(start, *self.device_span_us), np.clip(end, *self.device_span_us)
        if self.rounded:
            start, end, launch = np.ceil(start), np.floor(end), np.ceil(launch)
        return _device_events(self.trace, rows, start, end, launch)

    @property
    def has_device_events(self) -> bool:
        return len(self.rows) > 0


@dataclasses.dataclass(frozen=True)
class Fields:
    """How a dataclass result is written in JSON: the dict of its fields, the values
    as they are (orjson writes the dataclasses, enums and tuples inside it as
    `dataclasses.asdict` would make them), then each of `properties` (JSON key,
    attribute); a list or tuple of them, the list of each so; anything else as it is.
    `Fields()(result)` writes one result, `steps_data` a packed column of many: a long
    trace's hundred thousand steps without a deep copy of each, nor each one's
    dataclass made first. (orjson writes a dict several times faster than a slotted
    dataclass.)"""

    properties: tuple[tuple[str, str], ...] = ()

    def __call__(self, result: Any) -> Any:
        if isinstance(result, (list, tuple)):
            return list(map(self, result))
        names = _FIELDS.get(type(result), ())
        if names == ():
            names = _FIELDS[type(result)] = _field_names(type(result))
        if names is None:
            return result
        written = {f: getattr(result, f) for f in names}
        for key, attribute in self.properties:
            written[key] = getattr(result, attribute)
        return written

    def column(self, column: Column) -> list[Any]:
        """`self(value)` of each of a packed column's values."""
        written = column.plain_values()
        if self.properties:
            for row, result in zip(written, column.values(), strict=True):
                self._add_properties(row, result)
        return written

    def texts(self, column: Column) -> list[bytes]:
        """The compact JSON text of `self(value)` for each of a packed column's values,
        from the columns (a dataclass's properties added to its fields' text)."""
        if not self.properties:
            return column.texts()
        results = column.values()
        if all(dataclasses.is_dataclass(r) for r in results):  # of one type: a template
            more = [(key, [getattr(r, a) for r in results]) for key, a in self.properties]
            written = column.texts_with(more)
            if written is not None:
                return written
        return list(map(dumps, self.column(column)))

    def _add_properties(self, row: Any, result: Any) -> None:
        """`properties` of `result` added to `row`, its fields' dict (each of a list's)."""
        if isinstance(row, list):
            for item, of in zip(row, result, strict=True):
                self._add_properties(item, of)
        elif isinstance(row, dict) and dataclasses.is_dataclass(result):
            for key, attribute in self.properties:
                row[key] = getattr(result, attribute)


# A dataclass result's fields, as they are.
plain = Fields()

_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _field_names(kind: type) -> tuple[str, ...] | None:
    """The fields of a dataclass, None for any other type."""
    if not dataclasses.is_dataclass(kind):
        return None
    return tuple(f.name for f in dataclasses.fields(kind))


def _nothing_shown(result: Any) -> Shown:
    return ()


@dataclasses.dataclass(frozen=True)
class WindowAnalyzer(Generic[R]):
    """One analysis of a window: `analyse` it, write the result under `key` with `data`
    (None: the result is not written), show it with `describe`. `analyse_steps`, where
    given, gives what `analyse` gives for each of many steps of one trace at once (None:
    not for these steps), so a trace of many short steps costs what its events cost,
    not a round of numpy calls a step."""

    key: str
    analyse: Callable[[WindowContext], R]
    data: Callable[[R], Any] | None = None
    describe: Callable[[R], Shown] = _nothing_shown
    analyse_steps: Callable[[StepsContext], list[R] | None] | None = None

    def steps_texts(self, results: Column) -> list[bytes]:
        """The compact JSON text of `steps_data`'s each, from the columns where `data` is
        `Fields`."""
        if isinstance(self.data, Fields):
            return self.data.texts(results)
        return list(map(dumps, self.steps_data(results)))

    def steps_data(self, results: Column) -> list[Any]:
        """`data` of each of many steps' results, packed (`trace.packed`): at once from
        the columns where `data` is `Fields`."""
        if isinstance(self.data, Fields):
            return self.data.column(results)
        assert self.data is not None
        return list(map(self.data, results.values()))


def together(steps: Sequence[StepWindow]) -> intervals.Windows | None:
    """`steps` as `intervals.Windows`, where they can be analysed together (sorted by
    start, each overlapping its neighbours by no more than it allows); else None."""
    lo = np.array([w.start_us for w in steps], dtype=np.float64)
    hi = np.array([w.end_us for w in steps], dtype=np.float64)
    return intervals.Windows.of(lo, hi)


class StepsContext:
    """Many steps of one trace, analysed together: their `WindowContext`s, their windows
    as `intervals.Windows` (`steps`), and all their device events at once (`events`, by
    step; `owner`: the step of each)."""

    def __init__(
        self, trace: TraceContext, windows: Sequence[WindowContext], steps: intervals.Windows
    ) -> None:
        self.trace, self.windows, self.steps = trace, windows, steps

    @classmethod
    def of(cls, windows: Sequence[WindowContext]) -> StepsContext | None:
        """`windows` together, where they are steps of one trace (not the whole trace's
        window, none with HTA's rounding) sorted by start, each overlapping the next
        by no more than `intervals.Windows` allows; else None."""
        if not windows:
            return None
        trace = windows[0].trace
        if any(w.window.number is None or w.rounded or w.trace is not trace for w in windows):
            return None
        steps = together([w.window for w in windows])
        return None if steps is None else cls(trace, windows, steps)

    def __len__(self) -> int:
        return len(self.windows)

    @functools.cached_property
    def sizes(self) -> IntArray:
        """How many device events each step has."""
        return np.array([len(w.rows) for w in self.windows], dtype=np.int64)

    @functools.cached_property
    def owner(self) -> IntArray:
        """The step (index into `windows`) of each of `events`."""
        return np.repeat(np.arange(len(self.sizes)), self.sizes).astype(np.int64)

    @functools.cached_property
    def rows(self) -> IntArray:
        """Every step's `WindowContext.rows`, one after the other."""
        return np.concatenate([w.rows for w in self.windows]).astype(np.int64)

    @functools.cached_property
    def extents(self) -> tuple[IntArray, intervals.Windows] | None:
        """The steps that have device events, and each one's extent on the device: from
        its first event's start to its last one's end (what parts of its events lie
        in, see `parts`); None where these overlap more than `intervals.Windows` allows."""
        has = np.flatnonzero(self.sizes)
        if len(has) == 0:
            return None
        offsets = (np.cumsum(self.sizes) - self.sizes)[has]
        ev = self.events
        windows = intervals.Windows.of(
            np.minimum.reduceat(ev.start_us, offsets), np.maximum.reduceat(ev.end_us, offsets)
        )
        return None if windows is None else (has, windows)

    def parts(self, which: BoolArray, *, lasting: bool = False) -> intervals.Parts:
        """The events `which` as parts of `extents` (their window: the position of their
        step among those that have events); with `lasting`, those that last some time."""
        ev = self.events
        if lasting:
            which = which & (ev.end_us > ev.start_us)
        position = np.cumsum(self.sizes > 0) - 1
        return position[self.owner[which]], ev.start_us[which], ev.end_us[which]

    @functools.cached_property
    def events(self) -> DeviceEvents:
        """Every step's `WindowContext.events`, one after the other."""
        device, owner, rows = self.trace.device, self.owner, self.rows
        start, end = device.ts_us[rows], device.end_us[rows]
        span_lo = np.array(
            [-np.inf if w.device_span_us is None else w.device_span_us[0] for w in self.windows]
        )
        span_hi = np.array(
            [np.inf if w.device_span_us is None else w.device_span_us[1] for w in self.windows]
        )
        if len(rows):
            lo, hi = span_lo[owner], span_hi[owner]
            start, end = np.minimum(np.maximum(start, lo), hi), np.minimum(np.maximum(end, lo), hi)
        return _device_events(self.trace, rows, start, end, self.trace.launches_us[rows])


def _device_events(
    ctx: TraceContext, rows: IntArray, start: FloatArray, end: FloatArray, launch: FloatArray
) -> DeviceEvents:
    """The device events at `rows` of the trace's, with these times."""
    device = ctx.device
    return DeviceEvents(
        start_us=start,
        end_us=end,
        type=ctx.types[device.name[rows]],
        device=device.pid[rows],
        stream=device.tid[rows],
        launch_us=launch,
        name=device.name[rows],
    )
