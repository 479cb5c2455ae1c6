"""What the host was doing while the device idled: each stretch of the window in which
no device event runs, attributed to the host activity covering it.

The device idles because the host has not given it work yet; what the host did in the
meantime says why. Each idle instant goes to the first of, in this order: a host sync
(the host waits for the device: `cuda*Synchronize`, `aten::item`), data loading (a
DataLoader iteration), a collective on the host (`names.is_host_collective`: the host
waits for other ranks), a memory copy or set call (`cudaMemcpyAsync` to or from pageable host
memory returns only once the copy is done), a kernel launch, a top-level CPU op (the
framework and the op's own CPU work), and else no recorded host event at all (Python
between ops, or work the profiler did not record). The parts sum to the device's idle
time in the window's step (`step_span_us`): the gaps between its events, and the time
before the first and after the last while the step runs, less the time the device runs
other steps' work there (a step's; the whole trace's, counted as HTA counts it, has none).

Launching, CPU ops and no recorded event together are the device waiting on the host's
per-op work (`overhead_s`); of it, `host_wait_s` is what lies in gaps whose next kernel
was launched only after the gap began (HolisticTraceAnalysis's host wait) or before the
first event or after the last (`edges_s`). Both are parts of that whole, so a report
never shows the device waiting for the host longer than it idles for the host.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from lightspeed.document import Unit, Value, line
from lightspeed.trace import intervals
from lightspeed.trace.breakdown import ending_launch_steps, ending_launch_us
from lightspeed.trace.events import US, EventTable, FloatArray, Kind, seconds
from lightspeed.trace.host import HostIndex, named_spans, shared_host_index
from lightspeed.trace.names import BoolArray, names_where
from lightspeed.trace.packed import records
from lightspeed.trace.steps import StepWindow
from lightspeed.trace.window import (
    Shown,
    StepsContext,
    TraceContext,
    WindowAnalyzer,
    WindowContext,
    plain,
)

_COPY_CALL = re.compile(r"Mem(cpy|set)")
Spans = intervals.Spans


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IdleCauses:
    """Seconds of the device's idle time in a window, by what the host was doing."""

    idle_s: float = 0.0
    in_sync_s: float = 0.0
    loading_data_s: float = 0.0
    in_collectives_s: float = 0.0
    in_copy_calls_s: float = 0.0
    launching_s: float = 0.0
    in_cpu_ops_s: float = 0.0
    unrecorded_s: float = 0.0
    # Of overhead_s, not more parts of idle_s: in the host's wait gaps or at the edges,
    # and at the edges alone.
    host_wait_s: float = 0.0
    edges_s: float = 0.0

    @property
    def overhead_s(self) -> float:
        """Seconds the device waits on the host's per-op work: launching kernels, in CPU
        ops, or in no recorded event."""
        return self.launching_s + self.in_cpu_ops_s + self.unrecorded_s


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Index:
    host: HostIndex
    copy_call: BoolArray  # by name id


def _index(ctx: TraceContext) -> _Index:
    return _Index(
        host=ctx.once(shared_host_index),
        copy_call=names_where(ctx.trace, lambda n: bool(_COPY_CALL.search(n))),
    )


def _spans(table: EventTable, rows: BoolArray) -> Spans:
    return table.ts_us[rows], table.end_us[rows]


# The last of the activities in which the host waits on something other than its own
# per-op work (the device, data, other ranks, a blocking copy).
_LAST_ELSEWHERE = "in_copy_calls_s"


def _covered(ctx: TraceContext) -> list[tuple[str, Spans]]:
    """For each host activity, in the order idle time is attributed to them, the union
    of it and all before it: worked out once per trace, clipped to each window."""
    trace, index = ctx.trace, _index(ctx)
    ops, runtime = trace.table(Kind.CPU_OP), trace.table(Kind.RUNTIME)
    notes = trace.table(Kind.ANNOTATION)
    h = index.host

    activities = [
        ("in_sync_s", named_spans(h.sync, runtime, h.sync_ops)),
        ("loading_data_s", named_spans(h.loading, notes, ops)),
        ("in_collectives_s", named_spans(h.collective, notes, ops)),
        ("in_copy_calls_s", named_spans(h.launch & index.copy_call, runtime)),
        ("launching_s", named_spans(h.launch & ~index.copy_call, runtime)),
        ("in_cpu_ops_s", _spans(ops, h.outer_ops)),
    ]
    covered: list[tuple[str, Spans]] = []
    so_far: Spans = (np.empty(0), np.empty(0))
    for key, spans in activities:
        so_far = intervals.union(*intervals.join(so_far, spans))
        covered.append((key, so_far))
    return covered


def step_span_us(first_us: float, last_us: float, window: StepWindow) -> tuple[float, float]:
    """Where on the device's timeline the step of `window` lies, µs, whose device events
    run from `first_us` to `last_us`: as long as the step (`WindowFacts.step_s`, the
    longer of the window and the device's span), holding the device's span, and as near
    the window as that allows (a device lagging its host runs the step later)."""
    length = window.end_us - window.start_us
    if length <= last_us - first_us:
        return first_us, last_us
    start = min(max(window.start_us, last_us - length), first_us)
    return (window.start_us, window.end_us) if start == window.start_us else (start, start + length)


def idle_causes(w: WindowContext) -> IdleCauses:
    """The device's idle time in `w` by what the host was doing (module docstring)."""
    ev = w.events
    if len(ev.start_us) == 0:
        return IdleCauses()
    first, last = float(ev.start_us.min()), float(ev.end_us.max())
    lo, hi = step_span_us(first, last, w.window)
    busy = (ev.start_us, ev.end_us)
    if w.window.number is not None:  # its span may hold other steps' work: not idle
        busy = intervals.join(busy, intervals.within(w.trace.busy, lo, hi))
    idle = intervals.gaps(*busy, lo, hi)
    idle_us = float(np.sum(idle[1] - idle[0]))
    parts: dict[str, float] = {}
    attributed_us = 0.0
    elsewhere: Spans = (np.empty(0), np.empty(0))
    overhead_us = idle_us
    for key, covered in w.trace.once(_covered):
        clipped = intervals.within(covered, lo, hi)
        now_us = intervals.overlap(idle, clipped, disjoint=True)
        # The union only grows; a float rounding that says otherwise attributes nothing.
        parts[key] = max(0.0, now_us - attributed_us) * US
        attributed_us = max(attributed_us, now_us)
        if key == _LAST_ELSEWHERE:
            elsewhere, overhead_us = clipped, idle_us - attributed_us
    gap_s, gap_e = idle
    at_edge = (gap_e <= first) | (gap_s >= last)
    waits = at_edge.copy()
    waits[~at_edge] = ending_launch_us(ev, gap_e[~at_edge]) > gap_s[~at_edge]

    def of_overhead(rows: BoolArray) -> float:
        spans = (gap_s[rows], gap_e[rows])
        return min(
            overhead_us,
            max(0.0, intervals.length(*spans) - intervals.overlap(spans, elsewhere, disjoint=True)),
        )

    return IdleCauses(
        idle_s=idle_us * US,
        unrecorded_s=max(0.0, idle_us - attributed_us) * US,
        host_wait_s=of_overhead(waits) * US,
        edges_s=of_overhead(at_edge) * US,
        **parts,
    )


def idle_causes_steps(sc: StepsContext) -> list[IdleCauses] | None:
    """`idle_causes` of each of many steps at once; None where their spans on the device
    (`step_span_us`) overlap more than `intervals.Windows` allows."""
    ev, owner, ctx = sc.events, sc.owner, sc.trace
    sizes = np.bincount(owner, minlength=len(sc))
    result = [IdleCauses()] * len(sc)
    has = np.flatnonzero(sizes)
    if len(has) == 0:
        return result
    offsets = (np.cumsum(sizes) - sizes)[has]
    first = np.minimum.reduceat(ev.start_us, offsets)
    last = np.maximum.reduceat(ev.end_us, offsets)
    # `step_span_us` of each step.
    w_lo, w_hi = sc.steps.lo[has], sc.steps.hi[has]
    length = w_hi - w_lo
    fits = length <= last - first
    start = np.minimum(np.maximum(w_lo, last - length), first)
    at_window = start == w_lo
    spans = intervals.Windows.of(
        np.where(fits, first, np.where(at_window, w_lo, start)),
        np.where(fits, last, np.where(at_window, w_hi, start + length)),
    )
    if spans is None:
        return None
    # A step's events are part of all the device's work: its idle time is what that
    # leaves of its span.
    idle = spans.spread(*intervals.outside(intervals.within(ctx.busy, *spans.extent)))
    idle_us = spans.lengths(idle)

    parts: dict[str, FloatArray] = {}
    attributed = np.zeros(len(has))
    elsewhere, overhead_us = idle, idle_us
    for key, covered in ctx.once(_covered):
        clipped = spans.spread(*intervals.within(covered, *spans.extent))
        now_us = spans.overlap(idle, clipped)
        parts[key] = np.maximum(0.0, now_us - attributed)
        attributed = np.maximum(attributed, now_us)
        if key == _LAST_ELSEWHERE:
            elsewhere, overhead_us = clipped, idle_us - attributed
    gap_w, gap_s, gap_e = idle
    at_edge = (gap_e <= first[gap_w]) | (gap_s >= last[gap_w])
    waits = at_edge | (ending_launch_steps(ev, owner, has[gap_w], gap_e) > gap_s)

    def of_overhead(rows: BoolArray) -> FloatArray:
        gaps = (gap_w[rows], gap_s[rows], gap_e[rows])
        gaps_us = spans.lengths(gaps)
        return np.minimum(overhead_us, np.maximum(0.0, gaps_us - spans.overlap(gaps, elsewhere)))

    host_wait_us, edges_us = of_overhead(waits), of_overhead(at_edge)
    unrecorded_us = idle_us - attributed
    columns = {
        "idle_s": idle_us,
        "unrecorded_s": np.where(unrecorded_us > 0.0, unrecorded_us, 0.0),
        "host_wait_s": host_wait_us,
        "edges_s": edges_us,
        **parts,
    }
    made = records(
        IdleCauses,
        {key: seconds(us) for key, us in columns.items()},
        len(has),
    )
    for j, k in enumerate(has.tolist()):
        result[k] = made[j]
    return result


_LABELS = (
    ("in_sync_s", "in syncs"),
    ("loading_data_s", "loading data"),
    ("in_collectives_s", "in collectives"),
    ("in_copy_calls_s", "in copy calls"),
    ("launching_s", "launching kernels"),
    ("in_cpu_ops_s", "in CPU ops"),
    ("unrecorded_s", "in no recorded event"),
)


def _describe(c: IdleCauses) -> Shown:
    if not c.idle_s:
        return ()
    spans: list[str | Value] = []
    for key, label in _LABELS:
        seconds = getattr(c, key)
        if seconds > 0:
            spans += [", " if spans else "", f"{label} ", Value(seconds, Unit.SECONDS)]
    return [("idle, the host", line(*spans))]


IDLE_CAUSES = WindowAnalyzer(
    key="idle_causes",
    analyse=idle_causes,
    data=plain,
    describe=_describe,
    analyse_steps=idle_causes_steps,
)
