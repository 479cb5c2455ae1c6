"""The view across the ranks of a trace analysis: each collective's waits by rank, who
arrived last, each step compared across ranks (every step's spread between its slowest
and fastest rank on a chart; a long trace's table lists some), and the findings only a
comparison makes (of those made a step, the few that could gain most)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Column, Markup, Page, findings, label, notes
from lightspeed.report.html.trace_steps import markers, table_rows
from lightspeed.report.steps_shown import findings_left_out, shown_findings, shown_indices

# Kernel names are long; a bar's label keeps their start, numbered so that two names
# alike in it stay two bars.
_NAME_CHARS = 60


def across_ranks(page: Page, doc: Mapping[str, Any]) -> None:
    """Add the "Across ranks" section of a trace analysis with two or more ranks."""
    collectives = doc.get("collectives") or []
    ranks = [str(r["rank"]) for r in doc["ranks"]]
    parts: list[Markup] = []
    if collectives:
        parts.append(
            page.chart(
                "collective-waits",
                {
                    "data": [
                        {
                            "type": "bar",
                            "name": label(f"rank {rank}"),
                            "x": [
                                label(f"{i + 1}. {c['name'][:_NAME_CHARS]}")
                                for i, c in enumerate(collectives)
                            ],
                            "y": [c["wait_s"].get(rank, 0.0) for c in collectives],
                            "hovertemplate": "%{x}: %{y:.3s}s waiting<extra>rank "
                            + label(rank)
                            + "</extra>",
                        }
                        for rank in ranks
                    ],
                    "layout": {
                        "title": {
                            "text": "Time each rank waited in each collective for the last"
                            " to arrive"
                        },
                        "barmode": "group",
                        "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
                        "height": 380,
                    },
                },
            )
        )
        parts.append(
            page.chart(
                "last-arrivals",
                {
                    "data": [
                        {
                            "type": "bar",
                            "x": [label(f"rank {rank}") for rank in ranks],
                            "y": [
                                sum(c["last_arrivals"].get(rank, 0) for c in collectives)
                                for rank in ranks
                            ],
                            "hovertemplate": "%{x} arrived last %{y} times<extra></extra>",
                        }
                    ],
                    "layout": {
                        "title": {"text": "Who arrives last at the collectives"},
                        "yaxis": {"title": {"text": "times last"}},
                        "height": 320,
                    },
                },
            )
        )
    skew = doc.get("skew") or []
    spreads = [_spread(s) for s in skew]
    if skew:
        parts.append(page.chart("step-spread", _spread_figure(skew, spreads)))
    parts.append(_skew_table(page, skew, spreads))
    found = doc.get("findings") or []
    kept, left = shown_findings(
        [f.get("kind", "") for f in found],
        [(f.get("evidence") or {}).get("max_speedup") for f in found],
    )
    parts.append("<h3>Findings</h3>" + findings([found[i] for i in kept]))
    if left:
        parts.append(notes([findings_left_out(left, "the JSON")]))
    parts.append(notes(doc.get("notes") or [], title="Not analysed"))
    page.section("Across ranks", *parts, anchor="across-ranks")


def _spread(s: Mapping[str, Any]) -> float:
    """The slowest rank's step less the fastest's (seconds)."""
    times = (s.get("step_s") or {}).values()
    return max(times) - min(times) if times else 0.0


def _spread_figure(skew: list[Mapping[str, Any]], spreads: list[float]) -> dict[str, Any]:
    """Each step's slowest rank's time less its fastest's (`spreads`)."""
    drawn = markers(len(skew))
    return {
        "data": [
            {
                "type": drawn["type"],
                "mode": drawn["mode"],
                "x": [s["step"] for s in skew],
                "y": spreads,
                "marker": {"size": drawn["size"]},
                "hovertemplate": "step %{x}: %{y:.3s}s<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": "How much longer each step took on its slowest rank"},
            "xaxis": {"title": {"text": "step (ProfilerStep#)"}, "tickformat": "d"},
            "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI", "rangemode": "tozero"},
            "hovermode": "closest",
            "height": 300,
        },
    }


def _skew_table(page: Page, skew: list[Mapping[str, Any]], spreads: list[float]) -> Markup:
    most, ends, widest = table_rows()
    listed = shown_indices(spreads, most, ends, widest)
    rows: list[tuple[Value | str, ...]] = []
    for i in listed:
        if i is None:
            rows.append(("…",) * 5)
            continue
        s = skew[i]
        times = s.get("step_s") or {}
        waits = s.get("collective_wait_s") or {}
        slowest = max(times, key=times.__getitem__) if times else None
        fastest = min(times, key=times.__getitem__) if times else None
        rows.append(
            (
                Value(s["step"], Unit.INTEGER),
                Value(times.get(slowest), Unit.SECONDS, suffix=f" (rank {slowest})"),
                Value(times.get(fastest), Unit.SECONDS, suffix=f" (rank {fastest})"),
                Value(max(waits.values(), default=None), Unit.SECONDS),
                ", ".join(f"rank {k} ×{v}" for k, v in (s.get("last_arrivals") or {}).items()),
            )
        )
    caption = "Each step compared across ranks."
    if len(listed) < len(skew):
        caption = (
            f"Of {len(skew):,} steps compared across ranks, the first and last {ends} and"
            f" the {widest} whose ranks differ most; every step is on the chart above"
            " and in the JSON."
        )
    return page.table(
        (
            Column("step", "step", numeric=True),
            Column("slowest", "slowest", numeric=True),
            Column("fastest", "fastest", numeric=True),
            Column("max_wait", "longest wait", numeric=True),
            Column("last", "arrived last"),
        ),
        rows,
        caption=caption,
        kind="skew",
    )
