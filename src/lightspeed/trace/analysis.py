"""`analyse_traces`: from read traces to everything reported about them: per rank, the
whole trace and each step, and the skew between ranks.

Each window (a ProfilerStep, or the whole trace) is analysed by every analyzer of
`WINDOW_ANALYZERS`, in order; the facts the rules read (`diagnosis.WindowFacts`)
are taken from their results, and the diagnosis names the window's bound.
"""

from __future__ import annotations

import bisect
import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar, overload

import numpy as np

from lightspeed import progress
from lightspeed.document import findings_data
from lightspeed.rules import SKEW_SHARE, Bound, Finding, FindingKind, max_speedup
from lightspeed.trace.breakdown import (
    IDLE,
    KERNEL_TYPES_TIME,
    KERNELS,
    OVERLAP,
    STREAMS,
    TEMPORAL,
)
from lightspeed.trace.collectives import COMM, CollectiveSkew, match_collectives, merge, summed
from lightspeed.trace.diagnosis import WindowFacts, diagnose_window
from lightspeed.trace.events import IntArray, Kind, Trace
from lightspeed.trace.host import DEVICE_SYNCS, HOST, LAUNCHES
from lightspeed.trace.idle_causes import IDLE_CAUSES
from lightspeed.trace.load import can_fork
from lightspeed.trace.matmuls import MATMULS
from lightspeed.trace.packed import dumps, object_texts, pack, records, scalar_texts
from lightspeed.trace.steps import (
    StepWindow,
    device_step_spans,
    device_steps,
    hta_whole_trace_window,
    inside_step_spans,
    rows_by_step,
    step_windows,
)
from lightspeed.trace.timeline import Timeline, common_step, step_timeline
from lightspeed.trace.window import (
    StepsContext,
    TraceContext,
    WindowAnalyzer,
    WindowContext,
    together,
)

R = TypeVar("R")

# Every analysis of a window, in the order reports show them. An analysis is a module
# defining a WindowAnalyzer (see `trace.window`) and one entry here.
WINDOW_ANALYZERS: tuple[WindowAnalyzer[Any], ...] = (
    TEMPORAL,
    IDLE,
    IDLE_CAUSES,
    OVERLAP,
    MATMULS,
    LAUNCHES,
    HOST,
    DEVICE_SYNCS,
    KERNEL_TYPES_TIME,
    KERNELS,
    STREAMS,
    COMM,
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WindowAnalysis(WindowFacts):
    """One step of one rank (`step` None: the whole trace): the facts its diagnosis
    read, every analyzer's result (`window[KERNELS]`), and the diagnosis."""

    step: int | None
    analyzers: tuple[WindowAnalyzer[Any], ...]  # what ran, in report order
    results: Mapping[str, Any]
    bound: Bound
    findings: list[Finding]

    def __getitem__(self, analyzer: WindowAnalyzer[R]) -> R:
        result: R = self.results[analyzer.key]
        return result


def analyse_window(ctx: WindowContext) -> WindowAnalysis:
    """Run every analyzer on one window and diagnose it."""
    return _diagnosed(ctx, {a.key: a.analyse(ctx) for a in WINDOW_ANALYZERS})


def analyse_steps(contexts: Sequence[WindowContext]) -> StepAnalyses:
    """`analyse_window` of each of `contexts`, packed: where they are many steps of one
    trace (`StepsContext.of`), each analyzer that can does all of them at once; their
    diagnoses are made from each analyzer's results as they come, without a
    `WindowAnalysis` a step."""
    together = StepsContext.of(contexts) if len(contexts) >= STEPS_TOGETHER else None
    by_analyzer = {}
    for a in WINDOW_ANALYZERS:
        results = None
        if together is not None and a.analyse_steps is not None:
            results = a.analyse_steps(together)
        by_analyzer[a.key] = results if results is not None else [a.analyse(c) for c in contexts]
    n = len(contexts)
    facts: list[WindowFacts] = records(
        WindowFacts, {field: by_analyzer[key] for field, key in _FACTS}, n
    )
    diagnoses = list(map(diagnose_window, facts))
    return StepAnalyses(
        numbers=[c.window.number for c in contexts],
        results=by_analyzer,
        bounds=[d.bound for d in diagnoses],
        findings=[d.findings for d in diagnoses],
        step_s=[f.step_s for f in facts],
        has_device=[f.has_device for f in facts],
    )


def _diagnosed(ctx: WindowContext, results: dict[str, Any]) -> WindowAnalysis:
    """A window's analysis from its analyzers' results."""
    diagnosis = diagnose_window(WindowFacts(**_facts(results)))
    return _window_analysis(ctx.window.number, results, diagnosis.bound, diagnosis.findings)


# Each field of `WindowFacts` and the analyzer whose result it is.
_FACTS = (
    ("temporal", TEMPORAL.key),
    ("idle", IDLE.key),
    ("overlap", OVERLAP.key),
    ("launches", LAUNCHES.key),
    ("host", HOST.key),
    ("matmuls", MATMULS.key),
    ("idle_causes", IDLE_CAUSES.key),
)


def _facts(results: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a window's `WindowFacts`, from its analyzers' results."""
    return {field: results[key] for field, key in _FACTS}


def _window_analysis(
    step: int | None, results: dict[str, Any], bound: Bound, findings: list[Finding]
) -> WindowAnalysis:
    return WindowAnalysis(
        **_facts(results),
        step=step,
        analyzers=WINDOW_ANALYZERS,
        results=results,
        bound=bound,
        findings=findings,
    )


class StepAnalyses(Sequence[WindowAnalysis]):
    """A rank's steps' analyses, packed (`trace.packed`): a long trace has a hundred
    thousand, which as objects take about 5 kB each. `steps[i]` makes the i-th step's
    `WindowAnalysis` again, equal to the one packed (iterating makes a lot of them at
    once, a fraction of the cost of each alone); `numbers`, `step_s` and `bounds`
    give every step's number, length (seconds) and bound, and `has_device` whether it
    ran device work, without making them; `data(i)` the i-th step's JSON object
    (`window_data`), made from the columns without the step's objects."""

    __slots__ = (
        "_bounds",
        "_data",
        "_findings",
        "_numbers",
        "_results",
        "_starts",
        "_texts",
        "has_device",
        "step_s",
    )

    def __init__(
        self,
        *,
        numbers: Sequence[int | None] = (),
        results: Mapping[str, Sequence[Any]] | None = None,
        bounds: Sequence[Bound] = (),
        findings: Sequence[list[Finding]] = (),
        step_s: Sequence[float] = (),
        has_device: Sequence[bool] = (),
    ) -> None:
        """Steps from their figures, a list of each; `results`: each analyzer's of
        `WINDOW_ANALYZERS`, by its key (None: no steps)."""
        results = results or {a.key: () for a in WINDOW_ANALYZERS}
        # Parts of at most STEPS_A_PART: what is made again at once (a part's objects,
        # or its JSON texts) stays small.
        cuts = [(a, a + STEPS_A_PART) for a in range(0, len(numbers), STEPS_A_PART)] or [(0, 0)]
        self._numbers = [pack(numbers[a:b]) for a, b in cuts]
        self._results = [
            {a.key: pack(results[a.key][lo:hi]) for a in WINDOW_ANALYZERS} for lo, hi in cuts
        ]
        self._bounds = [pack(bounds[a:b]) for a, b in cuts]
        self._findings = [pack(findings[a:b]) for a, b in cuts]
        self._starts = [0, *(min(b, len(numbers)) for _, b in cuts)]
        # The part last asked for and its steps' JSON objects (`data`), or their texts.
        self._data: tuple[int, list[dict[str, Any]]] | None = None
        self._texts: tuple[int, list[bytes]] | None = None
        self.step_s = np.array(step_s, dtype=np.float64)
        self.has_device = np.array(has_device, dtype=np.bool_)

    @classmethod
    def of(cls, steps: Sequence[WindowAnalysis]) -> StepAnalyses:
        """`steps`, packed."""
        # Each step's results from the same analyzers, in order (`_window_analysis`).
        assert all(w.analyzers is WINDOW_ANALYZERS for w in steps)
        return cls(
            numbers=[w.step for w in steps],
            results={a.key: [w.results[a.key] for w in steps] for a in WINDOW_ANALYZERS},
            bounds=[w.bound for w in steps],
            findings=[w.findings for w in steps],
            step_s=[w.step_s for w in steps],
            has_device=[w.has_device for w in steps],
        )

    @classmethod
    def joined(cls, parts: Sequence[StepAnalyses]) -> StepAnalyses:
        """The steps of `parts`, one after the other."""
        joined = cls.__new__(cls)  # every field set below: nothing to pack first
        joined._numbers = [c for p in parts for c in p._numbers]
        joined._results = [c for p in parts for c in p._results]
        joined._bounds = [c for p in parts for c in p._bounds]
        joined._findings = [c for p in parts for c in p._findings]
        joined._starts = [0, *np.cumsum([len(c) for c in joined._numbers]).tolist()]
        joined._data = joined._texts = None
        joined.step_s = np.concatenate([np.zeros(0), *(p.step_s for p in parts)])
        joined.has_device = np.concatenate([np.zeros(0, np.bool_), *(p.has_device for p in parts)])
        return joined

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, i: int) -> WindowAnalysis: ...
    @overload
    def __getitem__(self, i: slice) -> list[WindowAnalysis]: ...
    def __getitem__(self, i: int | slice) -> WindowAnalysis | list[WindowAnalysis]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        part = bisect.bisect_right(self._starts, i) - 1
        k = i - self._starts[part]
        return _window_analysis(
            self._numbers[part][k],
            {key: results[k] for key, results in self._results[part].items()},
            self._bounds[part][k],
            self._findings[part][k],
        )

    def __iter__(self) -> Iterator[WindowAnalysis]:
        # Each part's steps made at once: together they cost a fraction of one at a time.
        for part in range(len(self._numbers)):
            yield from self._part(part)

    def results(self, analyzer: WindowAnalyzer[R]) -> Iterator[R]:
        """Each step's result of `analyzer`, in order, made again a part at a time without
        the rest of the step."""
        for results in self._results:
            yield from results[analyzer.key].values()

    def data(self, i: int) -> dict[str, Any]:
        """The i-th step's JSON object, `window_data(self[i])`; steps are mostly written
        in order, so each part's are made at once, from its columns."""
        part = bisect.bisect_right(self._starts, i) - 1
        if self._data is None or self._data[0] != part:
            self._data = part, self._part_data(part)
        return self._data[1][i - self._starts[part]]

    def texts(self, start: int, stop: int) -> list[bytes]:
        """The compact JSON texts of steps `start` to `stop` (`data` of each, as orjson
        writes it), made a part at a time from the columns, without the objects."""
        found: list[bytes] = []
        while start < stop:
            part = bisect.bisect_right(self._starts, start) - 1
            if self._texts is None or self._texts[0] != part:
                self._texts = part, self._part_texts(part)
            first = self._starts[part]
            end = min(stop, self._starts[part + 1])
            found += self._texts[1][start - first : end - first]
            start = end
        return found

    def __eq__(self, other: object) -> bool:
        # As the list of the steps would compare.
        if not isinstance(other, (list, StepAnalyses)):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        # Without the part last written (made again when asked).
        return {k: getattr(self, k) for k in self.__slots__ if k not in ("_data", "_texts")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
        self._data = self._texts = None

    def _part(self, part: int) -> list[WindowAnalysis]:
        """The steps of one part (a few thousand), made again at once: steps are mostly
        read in order, and made together they cost a fraction of one at a time."""
        by_key = {key: results.values() for key, results in self._results[part].items()}
        n = len(self._numbers[part])
        results = [
            dict(zip(by_key, row, strict=True)) for row in zip(*by_key.values(), strict=True)
        ]
        columns = {
            "step": self._numbers[part].values(),
            "analyzers": [WINDOW_ANALYZERS] * n,
            "results": results,
            "bound": self._bounds[part].values(),
            "findings": self._findings[part].values(),
        }
        for field, key in _FACTS:
            columns[field] = [r[key] for r in results]
        made: list[WindowAnalysis] = records(WindowAnalysis, columns, n)
        return made

    def _part_data(self, part: int) -> list[dict[str, Any]]:
        """The JSON objects of one part's steps, from its columns."""
        first, n = self._starts[part], len(self._numbers[part])
        head = [
            self._numbers[part].values(),
            self.step_s[first : first + n].tolist(),
            [b.value for b in self._bounds[part].values()],
            list(map(findings_data, self._findings[part].values())),
        ]
        written = [a for a in WINDOW_ANALYZERS if a.data is not None]
        results = [a.steps_data(self._results[part][a.key]) for a in written]
        keys = (*_DATA_HEAD, *(a.key for a in written))
        return [dict(zip(keys, row, strict=True)) for row in zip(*head, *results, strict=True)]

    def _part_texts(self, part: int) -> list[bytes]:
        """The JSON texts of one part's steps, from its columns."""
        first, n = self._starts[part], len(self._numbers[part])
        written = [a for a in WINDOW_ANALYZERS if a.data is not None]
        columns = [
            self._numbers[part].texts(),
            scalar_texts(self.step_s[first : first + n].tolist()),
            scalar_texts(self._bounds[part].values()),
            [dumps(findings_data(f)) for f in self._findings[part].values()],
            *(a.steps_texts(self._results[part][a.key]) for a in written),
        ]
        return object_texts((*_DATA_HEAD, *(a.key for a in written)), columns, n)

    @property
    def numbers(self) -> list[int | None]:
        """Each step's number (ProfilerStep#N), in order."""
        return [c[k] for c in self._numbers for k in range(len(c))]

    @property
    def bounds(self) -> list[Bound]:
        """Each step's bound, in order."""
        return [c[k] for c in self._bounds for k in range(len(c))]


# What a window's JSON object has before its analyzers' results.
_DATA_HEAD = ("step", "step_s", "bound", "findings")


def window_data(w: WindowAnalysis) -> dict[str, Any]:
    """A window's JSON object: its step, length, bound, findings, and each analyzer's
    result (`WindowAnalyzer.data`, under its key) that is written."""
    head = (w.step, w.step_s, w.bound.value, findings_data(w.findings))
    data = dict(zip(_DATA_HEAD, head, strict=True))
    for analyzer in w.analyzers:
        if analyzer.data is not None:
            data[analyzer.key] = analyzer.data(w[analyzer])
    return data


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankAnalysis:
    """One rank's trace: the whole of it, each step, and what could not be analysed.

    `whole` counts the device events HolisticTraceAnalysis counts in its whole-trace
    breakdowns (`steps.hta_whole_trace_window`); `last_step_left_out` says that this
    left the last ProfilerStep's out, as HTA does by default. `timeline`: one typical
    step, downsampled for drawing (`trace.timeline`; None: the trace has no events)."""

    rank: int
    path: str
    devices: tuple[str, ...]
    whole: WindowAnalysis
    steps: StepAnalyses
    notes: list[str]
    last_step_left_out: bool = False
    timeline: Timeline | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepSkew:
    """One step across ranks: each rank's step time and communication time, seconds,
    and its collectives matched across the ranks (`collectives`).

    A rank that computes faster than the others waits for them inside the collectives,
    so the spread of communication time is the time lost to imbalance."""

    step: int
    step_s: dict[int, float]
    communication_s: dict[int, float]
    collectives: list[CollectiveSkew] = dataclasses.field(default_factory=list)

    @property
    def communication_spread_s(self) -> float:
        values = self.communication_s.values()
        return max(values) - min(values)

    @property
    def slowest(self) -> int:
        """The rank with the longest step."""
        return max(self.step_s, key=lambda rank: self.step_s[rank])

    @property
    def fastest(self) -> int:
        """The rank with the shortest step."""
        return min(self.step_s, key=lambda rank: self.step_s[rank])

    @property
    def longest_waiter(self) -> int | None:
        """The rank that waits longest in the collectives (None: none matched)."""
        wait = self.collective_wait_s
        return max(wait, key=lambda rank: wait[rank]) if wait else None

    def often_last(self, top: int = 3) -> list[tuple[int, int]]:
        """(rank, times) of the ranks that arrived last most often, at most `top`."""
        last = self.last_arrivals
        return [(r, last[r]) for r in sorted(last, key=lambda r: -last[r])[:top] if last[r]]

    @property
    def collective_wait_s(self) -> dict[int, float]:
        """Each rank's time in this step's collectives waiting for later ranks."""
        return summed(c.wait_s for c in self.collectives)

    @property
    def last_arrivals(self) -> dict[int, int]:
        """How often each rank arrived last at this step's collectives."""
        return summed(c.last_arrivals for c in self.collectives)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceAnalysis:
    """Every rank's analysis, steps compared across ranks, and findings across ranks."""

    ranks: list[RankAnalysis]
    skew: list[StepSkew]
    collectives: list[CollectiveSkew]  # by kernel name, over the compared steps
    notes: list[str]  # what the comparison across ranks could not see
    findings: list[Finding]


def analyse_traces(
    traces: Sequence[Trace], *, include_last_step: bool = False, timeline_step: int | None = None
) -> TraceAnalysis:
    """Analyse each rank's trace, then compare the ranks. `include_last_step` counts
    the last ProfilerStep in the whole-trace figures (HTA's `include_last_profiler_step`).
    Every rank's timeline shows ProfilerStep#`timeline_step` (by default one step all
    ranks recorded, `timeline.common_step`)."""
    if timeline_step is None:
        timeline_step = common_step([step_windows(t) for t in traces])
    ranks = [
        analyse_rank(t, include_last_step=include_last_step, timeline_step=timeline_step)
        for t in traces
    ]
    return combine_ranks(ranks, [t.world_size for t in traces])


def combine_ranks(ranks: list[RankAnalysis], world_sizes: Sequence[int | None]) -> TraceAnalysis:
    """The ranks' analyses (in rank order) compared: steps and collectives across ranks,
    and what the world sizes the traces record (`world_sizes`, one a rank) say of them."""
    skew = step_skew(ranks)
    if skew:
        collectives = merge(c for s in skew for c in s.collectives)
    else:  # no step in common: the whole traces
        collectives = match_collectives({r.rank: r.whole[COMM] for r in ranks})
    return TraceAnalysis(
        ranks=ranks,
        skew=skew,
        collectives=collectives,
        notes=_rank_notes(world_sizes),
        findings=_skew_findings(skew),
    )


def portable(rank: RankAnalysis) -> RankAnalysis:
    """`rank` without its windows' analyzers (functions a pickle cannot carry between
    processes); `restored` puts them back."""
    return dataclasses.replace(rank, whole=_portable(rank.whole))


def restored(rank: RankAnalysis) -> RankAnalysis:
    """A `portable` rank's analysis with its windows' analyzers back."""
    return dataclasses.replace(rank, whole=_restored(rank.whole))


def _portable(window: WindowAnalysis) -> WindowAnalysis:
    return dataclasses.replace(window, analyzers=())


def _restored(window: WindowAnalysis) -> WindowAnalysis:
    return dataclasses.replace(window, analyzers=WINDOW_ANALYZERS)


def _rank_notes(world_sizes: Sequence[int | None]) -> list[str]:
    """What comparing these ranks cannot tell, from the world sizes they record."""
    worlds = sorted({w for w in world_sizes if w})
    if len(world_sizes) < 2 or not worlds:
        return []
    if len(worlds) > 1:
        sizes = ", ".join(map(str, worlds))
        return [f"the traces record different world sizes ({sizes}): are they from one run?"]
    if len(world_sizes) < worlds[0]:
        return [
            f"{len(world_sizes)} of {worlds[0]} ranks given: waits in collectives are measured"
            " between these ranks only"
        ]
    return []


def analyse_rank(
    trace: Trace,
    *,
    include_last_step: bool = False,
    timeline_step: int | None = None,
    parallel: bool | None = None,
) -> RankAnalysis:
    """The whole trace and each ProfilerStep of one rank (see `analyse_traces`), its
    timeline of ProfilerStep#`timeline_step` when it has it. With `parallel`, a forked
    process analyses half of the steps: by default where they must be analysed one at
    a time (`StepsContext.of`), from `PARALLEL_MIN_STEPS` of them on, where a process
    can fork safely and there is a second core. (Steps analysed together are not split:
    on 2 cores the fork saved 14 % of a 1 GB trace of 93,320 steps and 4–7 % of one of
    6,728, for 130–230 MB more peak memory, a fifth more.)"""
    ctx = TraceContext(trace)
    steps, spans, windows = _rank_steps(ctx)
    whole, counted, left_out = hta_whole_trace_window(trace, ctx.device, include_last_step)
    # The whole trace first: what its analyses index once per trace, the steps share
    # (in a forked process too).
    whole_analysis = analyse_window(
        WindowContext(ctx, whole, np.flatnonzero(counted), hta_times=True)
    )
    if parallel is None:
        parallel = (
            len(windows) >= PARALLEL_MIN_STEPS
            and together(steps) is None
            and (os.cpu_count() or 1) > 1
            and can_fork()
        )
    return RankAnalysis(
        rank=trace.rank or 0,
        path=trace.path,
        devices=trace.device_names,
        whole=whole_analysis,
        steps=_steps_told(ctx, windows, parallel),
        notes=_notes(trace, steps),
        last_step_left_out=left_out,
        timeline=step_timeline(ctx, steps, spans, timeline_step),
    )


def step_contexts(ctx: TraceContext) -> list[WindowContext]:
    """Each ProfilerStep of the trace as `analyse_rank` analyses it."""
    return [
        WindowContext(ctx, w, rows, device_span_us=span, inside=True)
        for w, rows, span in _rank_steps(ctx)[2]
    ]


def traced_step_timeline(trace: Trace, number: int) -> Timeline | None:
    """ProfilerStep#`number` of `trace` as traced, drawn as `analyse_trace` draws it."""
    ctx = TraceContext(trace)
    steps, spans, _ = _rank_steps(ctx)
    return step_timeline(ctx, steps, spans, number)


def _rank_steps(
    ctx: TraceContext,
) -> tuple[list[StepWindow], list[tuple[float, float] | None], list[_Window]]:
    """The trace's steps, each one's span on the device, and each step to analyse: its
    window, the rows of the device work it launched inside that span, and the span."""
    steps = step_windows(ctx.trace)
    per_step = np.where(ctx.work, device_steps(ctx.device, ctx.launches_us, steps), -1)
    spans = device_step_spans(ctx.device, per_step, len(steps))
    per_step = inside_step_spans(ctx.device, per_step, spans)
    windows = list(zip(steps, rows_by_step(per_step, len(steps)), spans, strict=True))
    return steps, spans, windows


# From this many steps on, a rank's steps are analysed in two processes.
PARALLEL_MIN_STEPS = 64
# A step to analyse: its window, its device events' rows, their span on the device.
_Window = tuple[StepWindow, IntArray, tuple[float, float] | None]
# What a forked process analyses: set just before it forks, read in it.
_SHARED: tuple[TraceContext, list[_Window]] | None = None


# Steps analysed together at most (their events are held until all are done), and at
# least: for a few, one at a time costs no more.
STEPS_AT_ONCE = 4096
STEPS_TOGETHER = 16
# Steps kept in one part of their packed columns (`StepAnalyses`), whose objects or
# JSON texts are made at once: 100 MB of 9,391 steps peaked at 202 MB with parts of
# 4,096, at 152 MB with 1,024, in the same time.
STEPS_A_PART = 1024


def _uncounted(steps: int) -> None:
    """Steps analysed where no progress is told (a forked half, its fallback here)."""


def _steps_told(ctx: TraceContext, windows: list[_Window], parallel: bool) -> StepAnalyses:
    """The windows analysed (`_in_two` with `parallel`, else `_analysed`), the steps
    analysed here counted as progress: a long trace's steps take seconds."""
    with progress.stage("analysing the steps"):
        if parallel:
            return _in_two(ctx, windows)
        with progress.counting(len(windows)) as advance:
            return _analysed(ctx, windows, advance)


def _analysed(
    ctx: TraceContext, windows: Sequence[_Window], advance: Callable[[int], None] = _uncounted
) -> StepAnalyses:
    """The windows' analyses, a few thousand at a time, each lot packed as it is done
    and its steps counted (`advance`)."""
    lots = []
    for first in range(0, len(windows), STEPS_AT_ONCE):
        lot = windows[first : first + STEPS_AT_ONCE]
        contexts = [
            WindowContext(ctx, w, rows, device_span_us=span, inside=True) for w, rows, span in lot
        ]
        lots.append(analyse_steps(contexts))
        advance(len(lot))
    return StepAnalyses.joined(lots)


def _second_half(start: int) -> StepAnalyses:
    """In the forked process: the shared windows from `start` on, analysed (its
    parent draws the progress)."""
    progress.detach()
    assert _SHARED is not None
    ctx, windows = _SHARED
    return _analysed(ctx, windows[start:])


def _in_two(ctx: TraceContext, windows: list[_Window]) -> StepAnalyses:
    """The windows analysed half here and half in a forked process, which reads the
    trace and its indexes from the memory it shares with this one; all here if that
    process fails."""
    global _SHARED
    half = len(windows) // 2
    _SHARED = (ctx, windows)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            theirs = pool.submit(_second_half, half)
            with progress.counting(half) as advance:
                mine = _analysed(ctx, windows[:half], advance)
            try:
                rest = theirs.result()
            except BrokenProcessPool:  # killed (out of memory?): its share is done here
                rest = _analysed(ctx, windows[half:])
    finally:
        _SHARED = None
    return StepAnalyses.joined([mine, rest])


def _notes(trace: Trace, steps: list[StepWindow]) -> list[str]:
    """What the analysis could not use, said plainly."""
    notes = []
    if not len(trace.table(Kind.KERNEL)):
        accelerator = sorted(c for c in trace.skipped if c.endswith(("_ccp_events", "_events")))
        extra = (
            f" (events of category {', '.join(accelerator)} are not read)" if accelerator else ""
        )
        notes.append(f"no GPU kernels in this trace: only the host side is analysed{extra}")
    if not steps:
        notes.append("no ProfilerStep#N annotations: the whole trace is analysed as one step")
    if trace.malformed:
        notes.append(f"{trace.malformed} events could not be read (wrong types or values)")
    if trace.not_utf8:
        many = trace.not_utf8 > 1
        notes.append(
            f"{trace.not_utf8} byte sequence{'s' * many} of the file {'are' if many else 'is'}"
            " not UTF-8 text: read as U+FFFD (\ufffd) in the names or values holding"
            f" {'them' if many else 'it'}"
        )
    if not trace.device_names and len(trace.table(Kind.KERNEL)):
        notes.append("no deviceProperties: the GPU model is unknown")
    return notes


def step_skew(ranks: list[RankAnalysis]) -> list[StepSkew]:
    """Each step that two or more ranks recorded, compared across them."""
    if len(ranks) < 2:
        return []
    # What the comparison reads of each step, made a part of steps at a time: not each
    # step's whole analysis, which for many ranks of many steps would not fit in memory.
    by_step: dict[int, dict[int, tuple[float, float, Any]]] = {}
    for r in ranks:
        steps = r.steps
        communication = (o.communication_s for o in steps.results(OVERLAP))
        for number, step_s, communication_s, comm in zip(
            steps.numbers, steps.step_s.tolist(), communication, steps.results(COMM), strict=True
        ):
            if number is not None:
                by_step.setdefault(number, {})[r.rank] = (step_s, communication_s, comm)
    return [
        StepSkew(
            step=step,
            step_s={rank: f[0] for rank, f in facts.items()},
            communication_s={rank: f[1] for rank, f in facts.items()},
            collectives=match_collectives({rank: f[2] for rank, f in facts.items()}),
        )
        for step, facts in sorted(by_step.items())
        if len(facts) >= 2
    ]


def _skew_findings(skew: list[StepSkew]) -> list[Finding]:
    """Steps whose length differs across ranks, and steps in whose collectives a rank
    waits long for the others."""
    findings = [f for f in map(_collective_wait, skew) if f is not None]
    for s in skew:
        slow, fast = s.slowest, s.fastest
        slow_s, fast_s = s.step_s[slow], s.step_s[fast]
        if fast_s <= 0 or slow_s / fast_s - 1 < SKEW_SHARE:
            continue
        findings.append(
            Finding(
                kind=FindingKind.RANK_SKEW,
                message=(
                    f"step {s.step}: rank {slow} takes {slow_s * 1e3:.2f} ms, rank {fast}"
                    f" {fast_s * 1e3:.2f} ms; the faster ranks wait for it in each collective"
                ),
                evidence={
                    "step": s.step,
                    "slowest_rank": slow,
                    "fastest_rank": fast,
                    "slowest_s": slow_s,
                    "fastest_s": fast_s,
                    "communication_spread_s": s.communication_spread_s,
                    "max_speedup": max_speedup((slow_s - fast_s) / slow_s),
                },
            )
        )
    return findings


def _collective_wait(s: StepSkew) -> Finding | None:
    """The step's longest wait in collectives, when it is a sizeable share of the step."""
    waiter = s.longest_waiter
    if waiter is None:
        return None
    wait = s.collective_wait_s
    step_s = s.step_s[waiter]
    share = wait[waiter] / step_s if step_s > 0 else 0.0
    if share < SKEW_SHARE:
        return None
    matched = sum(c.matched for c in s.collectives)
    often = s.often_last()
    arrivals = ", ".join(f"rank {rank} ×{times}" for rank, times in often)
    return Finding(
        kind=FindingKind.COLLECTIVE_WAIT,
        message=(
            f"step {s.step}: rank {waiter} waits {wait[waiter] * 1e3:.2f} ms"
            f" ({100 * share:.0f}% of its step) in collectives for later ranks; last to"
            f" arrive at the {matched} collectives: {arrivals}; even out the work between"
            " ranks (batch or sequence lengths, uneven shards), or find what the last"
            " ranks do before their collectives"
        ),
        evidence={
            "step": s.step,
            "waiting_rank": waiter,
            "wait_s": wait[waiter],
            "step_s": step_s,
            "most_often_last_rank": often[0][0],  # a wait > 0 has someone last
            "collectives": matched,
            "max_speedup": max_speedup(share),
        },
    )
