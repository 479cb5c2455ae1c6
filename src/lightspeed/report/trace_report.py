"""The report of a trace analysis, built once as a Document (`document: "trace-analysis"`).

Per rank: the whole trace (or one `--step`) with every window analyzer's result under
its key, `bound` and `findings`, the same for each step under `steps`, notes, and
`timeline`: one typical step's events, downsampled for drawing (`trace.timeline`).
Across ranks: each step compared (`skew`, with its collectives matched across ranks),
the collectives by kernel name, notes and findings. Seconds throughout; ranks as
string keys.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed.document import (
    Column,
    Document,
    Fields,
    Findings,
    Line,
    Notes,
    Section,
    Style,
    Table,
    Unit,
    Value,
    findings_data,
    line,
)
from lightspeed.facts.hardware import hardware_to_dict
from lightspeed.report import render_json
from lightspeed.report.steps_shown import (
    SHOWN_STEPS,
    bounds_caption,
    findings_left_out,
    percentiles_caption,
    shown_findings,
    shown_indices,
    shown_of,
    step_numbers,
)
from lightspeed.trace.analysis import (
    RankAnalysis,
    StepAnalyses,
    StepSkew,
    TraceAnalysis,
    WindowAnalysis,
    window_data,
)
from lightspeed.trace.collectives import CollectiveSkew
from lightspeed.trace.names import short_kernel_name
from lightspeed.trace.timeline import Timeline

DOCUMENT = "trace-analysis"


def trace_document(analysis: TraceAnalysis, *, step: int | None = None) -> Document:
    """Every rank's report; `step` details one ProfilerStep instead of the whole trace."""
    sections: list[Section] = [_rank_section(r, step) for r in analysis.ranks]
    if len(analysis.ranks) > 1:
        sections.append(_across_ranks(analysis))
    return Document(kind=DOCUMENT, data=trace_data(analysis), sections=tuple(sections))


def trace_data(analysis: TraceAnalysis) -> dict[str, Any]:
    """The JSON body of a trace analysis."""
    return {
        "ranks": [_rank_data(r) for r in analysis.ranks],
        # A step a line, made as it is written: ranks of many steps compare many.
        "skew": render_json.Streamed(len(analysis.skew), lambda i: _skew_data(analysis.skew[i])),
        "collectives": [_collective_data(c) for c in analysis.collectives],
        "notes": list(analysis.notes),
        "findings": findings_data(analysis.findings),
    }


def _by_rank(values: Mapping[int, float]) -> dict[str, float]:
    return {str(rank): v for rank, v in values.items()}


def _skew_data(s: StepSkew) -> dict[str, Any]:
    return {
        "step": s.step,
        "step_s": _by_rank(s.step_s),
        "communication_s": _by_rank(s.communication_s),
        "communication_spread_s": s.communication_spread_s,
        "collective_wait_s": _by_rank(s.collective_wait_s),
        "last_arrivals": _by_rank(s.last_arrivals),
        "collectives": [_collective_data(c) for c in s.collectives],
    }


def _collective_data(c: CollectiveSkew) -> dict[str, Any]:
    return {
        **dataclasses.asdict(c),
        "mean_spread_s": c.mean_spread_s,
        "wait_s": _by_rank(c.wait_s),
        "last_arrivals": _by_rank(c.last_arrivals),
    }


def _rank_data(r: RankAnalysis) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "path": r.path,
        "devices": list(r.devices),
        "last_step_left_out": r.last_step_left_out,
        **_whole_data(r.whole),
        # Each step's object made as it is written: a long trace has a hundred thousand.
        "steps": render_json.Streamed(len(r.steps), r.steps.data, r.steps.texts),
        "notes": list(r.notes),
        "timeline": None if r.timeline is None else timeline_data(r.timeline),
    }


def timeline_data(t: Timeline) -> dict[str, Any]:
    """One step's events as columns, for drawing (see `trace.timeline`)."""
    return {
        "step": t.step,
        "start_s": t.start_s,
        "duration_s": t.duration_s,
        "lanes": [{"name": lane.name, "kind": lane.kind} for lane in t.lanes],
        "events": {
            "lane": t.lane.tolist(),
            "start_s": t.event_start_s.tolist(),
            "duration_s": t.event_duration_s.tolist(),
            "name": list(t.name),
            "category": [c.value for c in t.category],
        },
        "events_in_window": t.events_in_window,
        "events_kept": t.events_kept,
    }


def _whole_data(w: WindowAnalysis) -> dict[str, Any]:
    """The whole trace's window; its matrix products carry the ceilings of the catalog
    GPU they are placed on (`hardware_ceilings`), so a report draws them from the JSON."""
    data = window_data(w)
    matmuls = data.get("matmuls")
    if matmuls and matmuls.get("hardware"):
        from lightspeed.hardware import catalog_hardware

        data["matmuls"] = {
            **matmuls,
            "hardware_ceilings": hardware_to_dict(catalog_hardware(matmuls["hardware"])),
        }
    return data


def _rank_section(r: RankAnalysis, step: int | None) -> Section:
    numbers = r.steps.numbers
    chosen: WindowAnalysis | None = r.whole
    if step is not None:  # only that step made again, not each step to find it
        chosen = r.steps[numbers.index(step)] if step in numbers else None
    title = f"Rank {r.rank}: {r.path}"
    if chosen is None:
        known = step_numbers(sorted(n for n in numbers if n is not None)) or "none"
        return Section(title, (Notes((f"no step {step} in this trace (steps: {known})",)),))
    rows: list[tuple[str, Line]] = [
        ("devices", line(_devices(r.devices))),
        (
            "window",
            line(
                _window_label(r) if chosen.step is None else f"step {chosen.step}, ",
                Value(chosen.step_s, Unit.SECONDS),
            ),
        ),
        ("bound", line(Value(chosen.bound.value, style=Style.BOLD))),
    ]
    blocks: list[Any] = []
    for analyzer in chosen.analyzers:
        for shown in analyzer.describe(chosen[analyzer]):
            if isinstance(shown, tuple):
                rows.append(shown)
            else:
                blocks.append(shown)
    parts: list[Any] = [Fields(tuple(rows))]
    if r.steps and step is None:
        on_device = r.whole.has_device or bool(r.steps.has_device.any())
        parts.append(_steps(r.steps, on_device=on_device))
    parts += blocks
    parts.append(Findings(tuple(chosen.findings)))
    if r.notes:
        parts.append(Notes(tuple(f"• {note}" for note in r.notes), title="Not analysed"))
    return Section(title, tuple(parts))


def _window_label(r: RankAnalysis) -> str:
    if r.last_step_left_out:
        return "whole trace (last step left out, as HTA does), "
    return "whole trace, "


def _devices(names: tuple[str, ...]) -> str:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(f"{c} × {n}" if c > 1 else n for n, c in counts.items()) or "—"


def shown_steps(steps: StepAnalyses) -> list[WindowAnalysis | None]:
    """The steps the terminal lists (`shown_indices`), a None where steps are left out."""
    if len(steps) <= SHOWN_STEPS:
        return list(steps)
    return [None if i is None else steps[i] for i in shown_indices(steps.step_s.tolist())]


def _steps_caption(steps: StepAnalyses) -> str | None:
    """What the rows left out of a long step table hold: percentiles of step time and
    each bound's count."""
    if len(steps) <= SHOWN_STEPS:
        return None
    return (
        f"{shown_of(len(steps))}; {percentiles_caption(steps.step_s.tolist())};"
        f" {bounds_caption(b.value for b in steps.bounds)}; every step is in --json and --html"
    )


def _steps(steps: StepAnalyses, *, on_device: bool) -> Table:
    """Each step's time, what kept the device busy and communicating (on a trace with no
    device, the host: its time in ops, data loading and syncs, and in collectives), its
    data loading, syncs and bound; for a long trace, some steps and a summary of all."""
    busy, comm = (
        (("busy_s", "busy"), ("communication_s", "comm"))
        if on_device
        else (("host_busy_s", "busy"), ("host_collective_s", "comm"))
    )
    columns = (
        Column("step", "step", numeric=True, min_width=4),
        Column("step_s", "time", numeric=True, min_width=7),
        Column(busy[0], busy[1], numeric=True, min_width=7),
        Column(comm[0], comm[1], numeric=True, min_width=7),
        Column("data_loading_s", "data", numeric=True, min_width=7),
        Column("syncs", "syncs", numeric=True, min_width=5),
        Column("bound", "bound", min_width=15),
    )
    gap = ("…",) * len(columns)
    return Table(
        title="Steps (busy, comm: the device's time)"
        if on_device
        else "Steps (busy, comm: the host's time; the trace has no device)",
        columns=columns,
        rows=tuple(
            gap
            if w is None
            else (
                Value(w.step, Unit.INTEGER),
                Value(w.step_s, Unit.SECONDS),
                Value(w.temporal.busy_s if on_device else w.host.busy_s, Unit.SECONDS),
                Value(
                    w.temporal.communication_s if on_device else w.host.collective_s,
                    Unit.SECONDS,
                ),
                Value(w.host.data_loading_s, Unit.SECONDS),
                Value(w.host.syncs, Unit.INTEGER),
                w.bound.value,
            )
            for w in shown_steps(steps)
        ),
        caption=_steps_caption(steps),
    )


def _across_ranks(analysis: TraceAnalysis) -> Section:
    """Steps compared across ranks, collectives matched across them, and findings; of a
    long trace, the steps and the findings made a step that could gain most."""
    parts: list[Any] = []
    if analysis.skew:
        spreads = [s.step_s[s.slowest] - s.step_s[s.fastest] for s in analysis.skew]
        gap = ("…",) * 5
        parts.append(
            Table(
                title="Steps (rank); last: rank ×times it arrived last at a collective",
                columns=(
                    Column("step", "step", numeric=True, min_width=4),
                    Column("slowest", "slowest"),
                    Column("fastest", "fastest"),
                    Column("max_wait", "max wait"),
                    Column("last", "last"),
                ),
                rows=tuple(
                    gap if i is None else _skew_row(analysis.skew[i])
                    for i in shown_indices(spreads)
                ),
                caption=_skew_caption(analysis.skew, spreads),
            )
        )
    if analysis.collectives:
        parts.append(
            Table(
                title="Collectives matched across ranks",
                columns=(
                    Column("name", "kernel", shrink=True, abbreviate=short_kernel_name),
                    Column("matched", "matched", numeric=True),
                    Column("mean_spread_s", "mean wait", numeric=True),
                    Column("max_spread_s", "max wait", numeric=True),
                    Column("spread_s", "total wait", numeric=True),
                ),
                rows=tuple(
                    (
                        c.name,
                        str(c.matched) + (f" (+{c.unmatched} unmatched)" if c.unmatched else ""),
                        Value(c.mean_spread_s, Unit.SECONDS),
                        Value(c.max_spread_s, Unit.SECONDS),
                        Value(c.spread_s, Unit.SECONDS),
                    )
                    for c in analysis.collectives
                ),
            )
        )
    found = analysis.findings
    kept, left = shown_findings([f.kind.value for f in found], [f.max_speedup for f in found])
    parts.append(Findings(tuple(found[i] for i in kept)))
    if left:
        parts.append(Notes((findings_left_out(left, "--json and --html"),)))
    if analysis.notes:
        parts.append(Notes(tuple(f"• {note}" for note in analysis.notes), title="Not analysed"))
    return Section("Across ranks", tuple(parts))


def _skew_row(s: StepSkew) -> tuple[Value | str, ...]:
    """A step across ranks: its slowest and fastest rank, the longest wait in its
    collectives, who arrived last most often."""
    slow, fast, waiter = s.slowest, s.fastest, s.longest_waiter
    return (
        Value(s.step, Unit.INTEGER),
        Value(s.step_s[slow], Unit.SECONDS, suffix=f" ({slow})"),
        Value(s.step_s[fast], Unit.SECONDS, suffix=f" ({fast})"),
        "—"
        if waiter is None
        else Value(s.collective_wait_s[waiter], Unit.SECONDS, suffix=f" ({waiter})"),
        ", ".join(f"{r} ×{n}" for r, n in s.often_last()) or "—",
    )


def _skew_caption(skew: Sequence[StepSkew], spreads: Sequence[float]) -> str | None:
    """What the rows left out of a long table of steps across ranks hold: the spread of
    step time between ranks and which rank is slowest how often."""
    if len(skew) <= SHOWN_STEPS:
        return None
    # A step as long on every rank has no slowest.
    slowest = Counter(s.slowest for s, spread in zip(skew, spreads, strict=True) if spread > 0)
    often = ", ".join(f"rank {r} in {n:,}" for r, n in slowest.most_common(3))
    parts = [
        shown_of(len(skew), "whose ranks differ most"),
        percentiles_caption(spreads, "the slowest rank's step less the fastest's"),
        *([f"slowest most often: {often}"] if often else []),
        "every step is in --json and --html",
    ]
    return "; ".join(parts)
