"""The view across the ranks of a trace analysis: each collective's waits by rank, who
arrived last, each step compared across ranks, and the findings only a comparison
makes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Column, Markup, Page, findings, label, notes

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
    parts.append(_skew_table(page, doc.get("skew") or []))
    parts.append("<h3>Findings</h3>" + findings(doc.get("findings") or []))
    parts.append(notes(doc.get("notes") or [], title="Not analysed"))
    page.section("Across ranks", *parts, anchor="across-ranks")


def _skew_table(page: Page, skew: list[Mapping[str, Any]]) -> Markup:
    rows = []
    for s in skew:
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
    return page.table(
        (
            Column("step", "step", numeric=True),
            Column("slowest", "slowest", numeric=True),
            Column("fastest", "fastest", numeric=True),
            Column("max_wait", "longest wait", numeric=True),
            Column("last", "arrived last"),
        ),
        rows,
        caption="Each step compared across ranks.",
        kind="skew",
    )
