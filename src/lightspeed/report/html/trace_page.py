"""The HTML report of a trace analysis, from its JSON document: the ranks' temporal and
idle breakdowns side by side, then per rank a timeline of one step, every step's time
and a table of the steps, launch and sync statistics, the top kernels, the matrix
products on the GPU's roofline and the findings; then the view across ranks (each
collective's waits, who arrives last)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed import units
from lightspeed.document import Unit, Value
from lightspeed.report.html import roofline
from lightspeed.report.html.across_ranks import across_ranks
from lightspeed.report.html.markup import Column, Markup, Page, fields, findings, label, notes
from lightspeed.report.html.trace_steps import steps_parts

_TEMPORAL = (
    ("compute_s", "computation", "#2b59c3"),
    ("communication_s", "communication", "#b3261e"),
    ("memory_s", "memory copies", "#e6a23c"),
    ("other_s", "other", "#7f7f7f"),
    ("idle_s", "idle", "#d9dde6"),
)
_IDLE = (
    ("host_wait_s", "host wait", "#d1603d"),
    ("kernel_wait_s", "kernel wait", "#3a9d5d"),
    ("other_s", "other", "#7f7f7f"),
)
# The timeline's event categories, their colours and line widths (collectives stand out).
_CATEGORIES = {
    "cpu-op": ("#2b59c3", 10),
    "kernel": ("#3a9d5d", 10),
    "collective": ("#b3261e", 14),
    "memory": ("#e6a23c", 10),
    "sync": ("#8e44ad", 10),
    "merged": ("#9aa3b5", 10),
}


def trace_page(doc: Mapping[str, Any]) -> Page:
    """The trace analysis' report."""
    ranks = doc["ranks"]
    page = Page(f"Trace analysis: {len(ranks)} rank{'s' * (len(ranks) != 1)}")
    page.section(
        "Breakdown by rank",
        page.chart("temporal", _stacked(ranks, "temporal_breakdown", _TEMPORAL, "Device time")),
        page.chart("idle", _stacked(ranks, "idle_breakdown", _IDLE, "Device idle time")),
        anchor="breakdown",
    )
    for i, r in enumerate(ranks):
        _rank_section(page, i, r, len(ranks))
    if len(ranks) > 1:
        across_ranks(page, doc)
    return page


def _stacked(
    ranks: Sequence[Mapping[str, Any]],
    key: str,
    parts: tuple[tuple[str, str, str], ...],
    title: str,
) -> dict[str, Any]:
    names = [label(f"rank {r['rank']}") for r in ranks]
    return {
        "data": [
            {
                "type": "bar",
                "name": shown,
                "x": names,
                "y": [(r.get(key) or {}).get(field, 0.0) for r in ranks],
                "marker": {"color": colour},
                "hovertemplate": "%{x}: %{y:.3s}s<extra>" + shown + "</extra>",
            }
            for field, shown, colour in parts
        ],
        "layout": {
            "title": {"text": f"{title} by kind (whole trace)"},
            "barmode": "stack",
            "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
            "height": 360,
        },
    }


def _rank_section(page: Page, index: int, r: Mapping[str, Any], ranks: int) -> None:
    launches, host = r.get("launches") or {}, r.get("host") or {}
    rows: list[tuple[str, Value | str | None]] = [
        ("path", r["path"]),
        ("devices", ", ".join(sorted(set(r.get("devices") or []))) or "none recorded"),
        ("window", Value(r.get("step_s"), Unit.SECONDS)),
        ("bound", r.get("bound")),
        ("steps", Value(len(r.get("steps") or []), Unit.INTEGER)),
    ]
    if launches:
        rows += [
            ("kernel launches", Value(launches.get("launches"), Unit.INTEGER)),
            ("CPU per launch", Value(launches.get("cpu_per_launch_s"), Unit.SECONDS)),
            ("median launch delay", Value(launches.get("median_delay_s"), Unit.SECONDS)),
            (
                "kernels shorter than their launch",
                Value(launches.get("shorter_than_launch"), Unit.INTEGER),
            ),
        ]
    matmuls = r.get("matmuls")
    if matmuls:
        timed_by = "time in their CPU ops" if matmuls.get("on_host") else "time in their kernels"
        rows += [
            ("matrix products", Value(matmuls.get("ops"), Unit.INTEGER)),
            ("their FLOPs", Value(matmuls.get("flops"), Unit.FLOPS)),
            (timed_by, Value(matmuls.get("time_s"), Unit.SECONDS)),
            ("their rate", Value(matmuls.get("flops_per_s"), Unit.FLOP_RATE)),
        ]
        if matmuls.get("fraction_of_sol") is not None:
            rows.append(
                (
                    f"share of their speed of light ({matmuls.get('hardware')})",
                    Value(matmuls["fraction_of_sol"], Unit.FRACTION),
                )
            )
    if host:
        rows += [
            ("host syncs", f"{host.get('syncs', 0)} ({units.seconds(host.get('sync_s') or 0)})"),
            (
                "sync calls",
                ", ".join(f"{k} ×{v}" for k, v in (host.get("sync_calls") or {}).items()) or "none",
            ),
            ("what syncs cost", Value(host.get("sync_lost_s"), Unit.SECONDS)),
            ("data loading", Value(host.get("data_loading_s"), Unit.SECONDS)),
        ]
    syncs = r.get("device_syncs") or {}
    if syncs:
        rows.append(("device sync records", ", ".join(f"{k} ×{v}" for k, v in syncs.items())))
    parts: list[Markup] = [fields(rows)]
    timeline = r.get("timeline")
    if timeline and timeline.get("events_kept"):
        parts.append(
            page.chart("timeline", timeline_figure(timeline), caption=timeline_caption(timeline))
        )
    whole_on_device = bool((r.get("temporal_breakdown") or {}).get("total_s"))
    parts += steps_parts(page, r.get("steps") or [], on_device=whole_on_device, tables=ranks)
    parts.append("<h3>Top kernels</h3>" + _kernels(page, r.get("kernels") or []))
    if matmuls and matmuls.get("points"):
        rl = matmul_roofline(matmuls)
        parts.append(
            page.chart(
                "roofline",
                roofline.figure(rl, group_title="precision"),
                caption=f"{len(rl.points)} of {matmuls['ops']} matrix products (the longest),"
                " sized by kernel time"
                + ("" if rl.roofs else "; the GPU is not in the catalog, so no roofs"),
            )
        )
    parts.append("<h3>Findings</h3>" + findings(r.get("findings") or []))
    parts.append(notes(r.get("notes") or [], title="Not analysed"))
    page.section(f"Rank {r['rank']}", *parts, anchor=f"rank-{index}")


def timeline_caption(t: Mapping[str, Any]) -> str:
    which = "the whole trace" if t.get("step") is None else f"ProfilerStep#{t['step']}"
    return (
        f"{which}: {t['events_kept']:,} of its {t['events_in_window']:,} events drawn (runs of"
        " events too short to see are merged into one block); collectives in red."
    )


def timeline_figure(t: Mapping[str, Any]) -> dict[str, Any]:
    """One line segment per event, a row per host thread and device stream, a trace per
    category (the legend hides and shows them)."""
    lanes = t["lanes"]
    events = t["events"]
    by_category: dict[str, dict[str, list[Any]]] = {}
    for lane, start, duration, name, category in zip(
        events["lane"],
        events["start_s"],
        events["duration_s"],
        events["name"],
        events["category"],
        strict=True,
    ):
        series = by_category.setdefault(category, {"x": [], "y": [], "text": []})
        hover = f"{label(name)}<br>{units.seconds(duration)} at {units.seconds(start)}"
        series["x"] += [start, start + duration, None]
        series["y"] += [lane, lane, None]
        series["text"] += [hover, hover, None]
    data = []
    for category, series in by_category.items():
        colour, width = _CATEGORIES.get(category, ("#444", 10))
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": label(category),
                "x": series["x"],
                "y": series["y"],
                "text": series["text"],
                "hovertemplate": "%{text}<extra>" + label(category) + "</extra>",
                "line": {"color": colour, "width": width},
                "connectgaps": False,
            }
        )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Timeline of one step"},
            "xaxis": {
                "title": {"text": "seconds into the step"},
                "exponentformat": "SI",
                "range": [0, t["duration_s"]],
            },
            "yaxis": {
                "tickvals": list(range(len(lanes))),
                "ticktext": [label(lane["name"]) for lane in lanes],
                "autorange": "reversed",
                "range": [-0.5, len(lanes) - 0.5],
            },
            "hovermode": "closest",
            "height": max(260, 60 + 34 * len(lanes)),
            "margin": {"l": 160},
        },
    }


def _kernels(page: Page, kernels: list[Mapping[str, Any]]) -> Markup:
    return page.table(
        (
            Column("name", "kernel"),
            Column("type", "type"),
            Column("count", "count", numeric=True),
            Column("total_s", "total", numeric=True),
            Column("mean_s", "mean", numeric=True),
            Column("max_s", "max", numeric=True),
        ),
        [
            (
                k["name"],
                k.get("type") or "—",
                Value(k.get("count"), Unit.INTEGER),
                Value(k.get("total_s"), Unit.SECONDS),
                Value(k.get("mean_s"), Unit.SECONDS),
                Value(k.get("max_s"), Unit.SECONDS),
            )
            for k in kernels
        ],
        filterable=True,
        kind="kernels",
    )


def matmul_roofline(matmuls: Mapping[str, Any]) -> roofline.Roofline:
    """The window's longest matrix products on the roofline of the catalog GPU that ran
    them (no roofs when the GPU is unknown)."""
    points = tuple(
        roofline.Point(
            group=p["precision"],
            name=p["name"],
            module="(trace)",
            detail=p["shape"],
            flops=p["flops"],
            bytes=p["bytes"],
            time_s=p["time_s"],
            sol_time_s=p.get("sol_s"),
        )
        for p in matmuls["points"]
        if roofline.placeable(p["flops"], p["bytes"], p["time_s"])
    )
    hw = matmuls.get("hardware_ceilings")
    return roofline.Roofline(
        title="Matrix products" + (f" on {hw['name']}" if hw else ""),
        points=points,
        roofs=roofline.roofs(hw, {p.group for p in points}, points) if hw else (),
        left_out=len(matmuls["points"]) - len(points),
    )
