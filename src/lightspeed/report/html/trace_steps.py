"""A trace rank's steps in its HTML report: every step's time on one chart, a colour a
bound, and a table of the steps: all of them up to `TABLE_STEPS`, of a longer trace
the first and last few and the slowest, as the terminal lists them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Column, Markup, Page
from lightspeed.report.steps_shown import (
    SHOWN_STEPS,
    bound_counts,
    bounds_caption,
    percentiles_caption,
    shown_indices,
)

# Steps a table lists at most, and of a longer trace the first and last and the slowest
# it lists; the chart draws every step.
TABLE_STEPS = 2000
TABLE_ENDS, TABLE_SLOWEST = 50, 100
# Above this many points a chart is drawn with WebGL: SVG slows the browser first.
WEBGL_POINTS = 5000

BOUND_COLOURS = {
    "compute": "#2b59c3",
    "memory": "#e6a23c",
    "overhead": "#d1603d",
    "synchronization": "#8e44ad",
    "data-loading": "#3a9d5d",
    "communication": "#b3261e",
    "unknown": "#9aa3b5",
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    """What the chart and the table show of a step's JSON object."""

    number: int | None
    step_s: float
    device_s: float  # the device's span in the step (0: no device work)
    device_busy_s: float
    device_communication_s: float
    host_busy_s: float
    host_collective_s: float
    data_loading_s: float
    syncs: int
    bound: str
    finding: str

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> _Step:
        host = s.get("host") or {}
        temporal = s.get("temporal_breakdown") or {}
        found = s.get("findings") or []
        return cls(
            number=s.get("step"),
            step_s=s["step_s"],
            device_s=temporal.get("total_s", 0.0),
            device_busy_s=temporal.get("total_s", 0.0) - temporal.get("idle_s", 0.0),
            device_communication_s=temporal.get("communication_s", 0.0),
            host_busy_s=host.get("busy_s", 0.0),
            host_collective_s=host.get("collective_s", 0.0),
            data_loading_s=host.get("data_loading_s", 0.0),
            syncs=host.get("syncs", 0),
            bound=s.get("bound") or "unknown",
            finding=found[0]["message"] if found else "",
        )


def table_rows(tables: int = 1) -> tuple[int, int, int]:
    """How many steps a table lists, where a page has `tables` such tables (a rank's
    each; they share `TABLE_STEPS`): all of them up to the first figure, else the first
    and last (the second) and the slowest (the third)."""
    most = max(SHOWN_STEPS, TABLE_STEPS // max(1, tables))
    share = most / TABLE_STEPS
    return most, max(5, round(TABLE_ENDS * share)), max(5, round(TABLE_SLOWEST * share))


def steps_parts(
    page: Page, steps: Iterable[Mapping[str, Any]], *, on_device: bool, tables: int = 1
) -> list[Markup]:
    """The chart of every step's time and the table of the steps, from the steps' JSON
    objects (`tables`: how many such a page has, `table_rows`). The table gives the
    device's busy and communication time where the trace ran device work (`on_device`,
    or a step did), else the host's. Nothing for a trace without steps."""
    found = [_Step.of(s) for s in steps]
    if not found:
        return []
    on_device = on_device or any(s.device_s > 0 for s in found)
    times = [s.step_s for s in found]
    bounds = bounds_caption(s.bound for s in found)
    summary = f"{len(found):,} steps; {percentiles_caption(times)}; {bounds}"
    chart = page.chart("step-times", _figure(found), caption=summary)
    most, ends, slowest = table_rows(tables)
    listed = shown_indices(times, most, ends, slowest)
    whose = "the device's" if on_device else "the host's (the trace has no device)"
    caption = f"busy and comm: {whose} time"
    if len(listed) < len(found):
        caption = (
            f"of {len(found):,} steps, the first and last {ends} and the {slowest}"
            " slowest; every step is on the chart above and in the JSON;"
            f" {caption}"
        )
    table = page.table(
        (
            Column("step", "step", numeric=True),
            Column("step_s", "time", numeric=True),
            Column("busy_s", "busy", numeric=True),
            Column("communication_s", "comm", numeric=True),
            Column("data_loading_s", "data loading", numeric=True),
            Column("syncs", "syncs", numeric=True),
            Column("bound", "bound"),
            Column("finding", "first finding"),
        ),
        [("…",) * 8 if i is None else _row(found[i], on_device) for i in listed],
        caption=caption,
        filterable=True,
        kind="steps",
    )
    return ["<h3>Steps</h3>", chart, table]


def _row(s: _Step, on_device: bool) -> tuple[Value | str, ...]:
    busy, comm = (
        (s.device_busy_s, s.device_communication_s)
        if on_device
        else (s.host_busy_s, s.host_collective_s)
    )
    return (
        Value(s.number, Unit.INTEGER),
        Value(s.step_s, Unit.SECONDS),
        Value(busy, Unit.SECONDS),
        Value(comm, Unit.SECONDS),
        Value(s.data_loading_s, Unit.SECONDS),
        Value(s.syncs, Unit.INTEGER),
        s.bound,
        s.finding,
    )


def markers(points: int) -> dict[str, Any]:
    """A scatter trace's type and marker size for this many points: WebGL and smaller
    markers past `WEBGL_POINTS`."""
    many = points > WEBGL_POINTS
    return {"type": "scattergl" if many else "scatter", "mode": "markers", "size": 3 if many else 5}


def _figure(steps: list[_Step]) -> dict[str, Any]:
    """Each step's time against its number, a trace a bound (the most common first; the
    legend hides and shows them)."""
    drawn = markers(len(steps))
    data = []
    for bound, _ in bound_counts(s.bound for s in steps):
        mine = [s for s in steps if s.bound == bound]
        data.append(
            {
                "type": drawn["type"],
                "mode": drawn["mode"],
                "name": bound,
                "x": [s.number for s in mine],
                "y": [s.step_s for s in mine],
                "marker": {"color": BOUND_COLOURS.get(bound, "#444"), "size": drawn["size"]},
                "hovertemplate": "step %{x}: %{y:.3s}s<extra>" + bound + "</extra>",
            }
        )
    longest = max(s.step_s for s in steps)
    numbers = [s.number for s in steps if s.number is not None]
    # Ticks on whole steps only: a handful of steps would get ticks at halves.
    span = max(numbers) - min(numbers) if numbers else 0
    return {
        "data": data,
        "layout": {
            "title": {"text": "Every step's time, by what bounds it"},
            "xaxis": {
                "title": {"text": "step (ProfilerStep#)"},
                "tickformat": "d",
                "dtick": _round_step(span / 10),
            },
            "yaxis": {
                "title": {"text": "seconds"},
                "exponentformat": "SI",
                "range": [0, longest * 1.05 or 1.0],
            },
            "hovermode": "closest",
            "showlegend": True,
            "height": 320,
        },
    }


def _round_step(at_least: float) -> int:
    """The smallest whole 1, 2 or 5 times a power of ten that is `at_least`."""
    power = 10 ** max(0, math.floor(math.log10(at_least))) if at_least > 1 else 1
    return next(m * power for m in (1, 2, 5, 10) if m * power >= at_least)
