"""The HTML report of a serving plan (`lightspeed serve-plan`), from its JSON document:
the GPUs against one model per GPU at batch 1, each GPU's cycle and what it runs, and
each session's share within its SLO when the plan was simulated, and where it also ran
for real (`--run`), measured beside it with the p99."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Cell, Column, Markup, Page, fields, label
from lightspeed.report.serving_report import MEASURED_CAPTION, PLAN_CAPTION, gpu_kind


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
                *([("run for real", Value(doc["run_s"], Unit.SECONDS))] if "run_s" in doc else []),
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
    measured = doc.get("measured")
    bars: list[dict[str, Any]] = [
        {
            "type": "bar",
            "x": [label(str(o["session"])) for o in outcomes],
            "y": [_within(o) for o in outcomes],
            "marker": {"color": "#2b59c3"},
            "hovertemplate": "%{x}: %{y:.2%} within its SLO<extra></extra>",
        }
    ]
    if measured is not None:
        bars[0]["name"] = "simulated"
        bars.append(
            {
                "type": "bar",
                "name": "measured",
                "x": [label(str(o["session"])) for o in measured],
                "y": [_within(o) for o in measured],
                "marker": {"color": "#e07b39"},
                "hovertemplate": "%{x}: %{y:.2%} within its SLO, measured<extra></extra>",
            }
        )
    chart = page.chart(
        "within-slo",
        {
            "data": bars,
            "layout": {
                "title": {
                    "text": "Requests within their SLO, simulated"
                    + (" and measured" if measured is not None else "")
                },
                "yaxis": {"title": {"text": "share"}, "tickformat": ".0%", "range": [0, 1.05]},
                "height": 320,
            },
        },
    )
    page.section("GPUs", table, anchor="gpus")
    page.section("Simulated", chart, anchor="simulated")
    if measured is not None:
        page.section("Measured", _measured_table(page, doc), anchor="measured")
    return page


def _within(outcome: Mapping[str, Any]) -> float:
    requests = outcome["requests"]
    return float(outcome["within_slo"] / requests) if requests else 1.0


def _measured_table(page: Page, doc: Mapping[str, Any]) -> Markup:
    """Each session's measured share within its SLO and p99 beside the simulated share."""
    simulated = {o["session"]: o for o in doc["outcomes"]}
    rows: list[list[Cell]] = [
        [
            str(o["session"]),
            Value(o["requests"], Unit.INTEGER),
            Value(o.get("answered", 0), Unit.INTEGER),
            Value(_within(o), Unit.FRACTION),
            Value(o.get("p99_s"), Unit.SECONDS),
            Value(_within(simulated[o["session"]]), Unit.FRACTION)
            if o["session"] in simulated
            else "",
        ]
        for o in doc["measured"]
    ]
    run_s = doc.get("run_s")
    return page.table(
        (
            Column("session", "session"),
            Column("requests", "requests", True),
            Column("answered", "answered", True),
            Column("within", "within SLO", True),
            Column("p99", "p99", True),
            Column("simulated", "simulated", True),
        ),
        rows,
        caption=(f"{run_s:g} s run for real: " if run_s is not None else "") + MEASURED_CAPTION,
        kind="measured",
    )
