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
time: the gaps between its events, and in a step also the time before the first and
after the last while the step runs (the whole trace's, like its temporal breakdown,
spans its device events).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from lightspeed.document import Unit, Value, line
from lightspeed.trace import intervals
from lightspeed.trace.events import US, EventTable, Kind
from lightspeed.trace.host import HostIndex, shared_host_index
from lightspeed.trace.names import BoolArray, names_where
from lightspeed.trace.window import Shown, TraceContext, WindowAnalyzer, WindowContext

_COPY_CALL = re.compile(r"Mem(cpy|set)")
Spans = intervals.Spans


@dataclasses.dataclass(frozen=True, kw_only=True)
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


def _covered(ctx: TraceContext) -> list[tuple[str, Spans]]:
    """For each host activity, in the order idle time is attributed to them, the union
    of it and all before it: worked out once per trace, clipped to each window."""
    trace, index = ctx.trace, _index(ctx)
    ops, runtime = trace.table(Kind.CPU_OP), trace.table(Kind.RUNTIME)
    notes = trace.table(Kind.ANNOTATION)
    h = index.host

    def named(mask: BoolArray, *tables: EventTable) -> Spans:
        return intervals.join(*(_spans(t, mask[t.name]) for t in tables))

    activities = [
        ("in_sync_s", named(h.sync, runtime, ops)),
        ("loading_data_s", named(h.loading, notes, ops)),
        ("in_collectives_s", named(h.collective, notes, ops)),
        ("in_copy_calls_s", named(h.launch & index.copy_call, runtime)),
        ("launching_s", named(h.launch & ~index.copy_call, runtime)),
        ("in_cpu_ops_s", _spans(ops, h.outer_ops)),
    ]
    covered: list[tuple[str, Spans]] = []
    so_far: Spans = (np.empty(0), np.empty(0))
    for key, spans in activities:
        so_far = intervals.union(*intervals.join(so_far, spans))
        covered.append((key, so_far))
    return covered


def idle_causes(w: WindowContext) -> IdleCauses:
    """The device's idle time in `w` by what the host was doing (module docstring)."""
    ev = w.events
    if len(ev.start_us) == 0:
        return IdleCauses()
    lo, hi = float(ev.start_us.min()), float(ev.end_us.max())
    if w.window.number is not None:  # a step: also its time before and after the device's
        lo, hi = min(lo, w.window.start_us), max(hi, w.window.end_us)
    idle = intervals.gaps(ev.start_us, ev.end_us, lo, hi)
    idle_us = float(np.sum(idle[1] - idle[0]))
    parts: dict[str, float] = {}
    attributed_us = 0.0
    for key, covered in w.trace.once(_covered):
        now_us = intervals.overlap(idle, intervals.clip(*covered, lo, hi))
        parts[key] = (now_us - attributed_us) * US
        attributed_us = now_us
    return IdleCauses(idle_s=idle_us * US, unrecorded_s=(idle_us - attributed_us) * US, **parts)


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
    key="idle_causes", analyse=idle_causes, data=dataclasses.asdict, describe=_describe
)
