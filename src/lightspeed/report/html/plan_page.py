"""The HTML report of a serving plan (`lightspeed serve-plan`), from its JSON document:
the GPUs against one model per GPU at batch 1, each GPU's cycle and what it runs, and
each session's share within its SLO when the plan was simulated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Cell, Column, Page, fields, label
from lightspeed.report.serving_report import PLAN_CAPTION, gpu_kind


def plan_page(doc: Mapping[str, Any]) -> Page:
    """The serving plan's report."""
    gpus = doc["gpus"]
    page = Page("Serving plan")
    page.section(
        "Summary",
        fields(
            [
                ("GPUs", Value(len(gpus), Unit.INTEGER)),
                ("one model per GPU at batch 1", Value(doc["baseline_gpus"], Unit.INTEGER)),
                ("unservable", ", ".join(doc["unservable"]) or "none"),
                ("simulated", Value(doc["simulated_s"], Unit.SECONDS)),
            ]
        ),
        anchor="summary",
    )
    rows: list[list[Cell]] = []
    for i, gpu in enumerate(gpus, 1):
        for share in gpu["shares"]:
            rows.append(
                [
                    Value(i, Unit.INTEGER),
                    gpu_kind(gpu["saturated"], len(gpu["shares"])),
                    str(share["session"]),
                    Value(share["batch_size"], Unit.INTEGER),
                    Value(share["rate_per_s"], Unit.NUMBER, ",.1f"),
                    Value(gpu["duty_cycle_s"], Unit.SECONDS),
                    Value(gpu["occupancy"], Unit.FRACTION),
                ]
            )
    table = page.table(
        (
            Column("gpu", "GPU", True),
            Column("kind", "kind"),
            Column("session", "session"),
            Column("batch", "batch", True),
            Column("rate", "req/s", True),
            Column("cycle", "cycle", True),
            Column("busy", "busy", True),
        ),
        rows,
        caption=PLAN_CAPTION,
        kind="plan",
    )
    outcomes = doc["outcomes"]
    chart = page.chart(
        "within-slo",
        {
            "data": [
                {
                    "type": "bar",
                    "x": [label(str(o["session"])) for o in outcomes],
                    "y": [
                        o["within_slo"] / o["requests"] if o["requests"] else 1.0 for o in outcomes
                    ],
                    "marker": {"color": "#2b59c3"},
                    "hovertemplate": "%{x}: %{y:.2%} within its SLO<extra></extra>",
                }
            ],
            "layout": {
                "title": {"text": "Requests within their SLO, simulated"},
                "yaxis": {"title": {"text": "share"}, "tickformat": ".0%", "range": [0, 1.05]},
                "height": 320,
            },
        },
    )
    page.section("GPUs", table, anchor="gpus")
    page.section("Simulated", chart, anchor="simulated")
    return page
