"""The HTML report of a bench run, from its JSON document: a row per workload with its
key figures and a link to the workload's own section, every workload's whole step on
the hardware's roofline, and per workload its rounds, phases, memory and findings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lightspeed import units
from lightspeed.document import Unit, Value
from lightspeed.report.html import roofline
from lightspeed.report.html.markup import Cell, Column, Link, Markup, Page, fields, findings, text
from lightspeed.report.html.memory_charts import memory_charts
from lightspeed.report.html.profile_page import ceilings_text, phases_figure

_COLUMNS = (
    Column("workload", "workload"),
    Column("step_s", "step", numeric=True),
    Column("round_spread", "rounds spread", numeric=True),
    Column("samples_per_s", "samples/s", numeric=True),
    Column("tokens_per_s", "tokens/s", numeric=True),
    Column("efficiency", "of SoL", numeric=True),
    Column("mfu", "MFU", numeric=True),
    Column("peak_bytes", "peak memory", numeric=True),
    Column("bound", "bound"),
)


def anchor(index: int, name: str) -> str:
    """The id of the section of the `index`-th workload: its position, then its name with
    anything but letters, digits, `-` and `_` made `-` (the position keeps two names
    alike once cut, such as `a.b` and `a-b`, apart)."""
    return f"w{index}-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)


def bench_page(doc: Mapping[str, Any]) -> Page:
    """The bench run's report."""
    results = doc["results"]
    page = Page(f"Bench: {len(results)} workloads ({doc.get('size')})")
    hw = doc["hardware"]
    environment = doc.get("environment") or {}
    page.section(
        "Summary",
        fields(
            [
                ("workloads", Value(len(results), Unit.INTEGER)),
                ("size", str(doc.get("size"))),
                ("rounds", Value(doc.get("rounds"), Unit.INTEGER)),
                ("threads", Value(doc.get("threads"), Unit.INTEGER)),
                ("hardware", f"{hw['name']} ({hw['id']})"),
                ("ceilings used", ceilings_text(hw, {r["workload"]["dtype"] for r in results})),
                ("torch", environment.get("torch_version") or "not recorded"),
                ("git commit", environment.get("git_commit") or "not recorded"),
                ("date", doc.get("created_at")),
            ]
        ),
        _table(page, results),
        anchor="summary",
    )
    rl = bench_roofline(doc)
    if rl.points:
        page.section(
            "Roofline",
            page.chart(
                "roofline",
                roofline.figure(rl, group_title="bound"),
                caption="Each workload's whole step: its FLOPs over its bytes, and over its"
                " step time; sized by step time.",
            ),
            anchor="roofline",
        )
    for i, result in enumerate(results):
        _workload_section(page, i, result)
    return page


def _table(page: Page, results: list[Mapping[str, Any]]) -> Markup:
    rows: list[list[Cell]] = []
    for i, r in enumerate(results):
        link = Link(r["workload"]["name"], anchor(i, r["workload"]["name"]))
        if r.get("failure"):
            failed: Cell = Value(f"failed: {r['failure']}")
            rows.append([link, failed, *[None] * 7])
            continue
        timing, totals, memory = r.get("timing") or {}, r.get("totals") or {}, r.get("memory") or {}
        rows.append(
            [
                link,
                Value(r.get("step_s"), Unit.SECONDS),
                Value(r.get("round_spread"), Unit.FRACTION),
                Value(timing.get("samples_per_s"), Unit.NUMBER, ",.1f"),
                Value(timing.get("tokens_per_s"), Unit.NUMBER, ",.0f"),
                Value(totals.get("efficiency"), Unit.FRACTION),
                Value(totals.get("mfu"), Unit.FRACTION),
                Value(memory.get("peak_bytes"), Unit.BYTES),
                r.get("bound") or "—",
            ]
        )
    return page.table(
        _COLUMNS,
        rows,
        caption="step: the median of the rounds' medians; rounds spread: slowest minus"
        " fastest round over the step. Click a workload for its section, a heading to sort.",
        kind="bench",
    )


def bench_roofline(doc: Mapping[str, Any]) -> roofline.Roofline:
    """Every workload that ran, its whole step as one point."""
    points = []
    for r in doc["results"]:
        totals = r.get("totals") or {}
        if r.get("failure") or not roofline.placeable(
            totals.get("flops"), totals.get("bytes"), r.get("step_s")
        ):
            continue
        points.append(
            roofline.Point(
                group=r.get("bound") or "—",
                name=r["workload"]["name"],
                module="(whole step)",
                detail=f"batch {r['workload']['batch_size']}, {r['workload']['dtype']}",
                flops=float(totals["flops"]),
                bytes=float(totals["bytes"]),
                time_s=float(r["step_s"]),
                sol_time_s=totals.get("sol_time_s"),
            )
        )
    placed = tuple(points)
    dtypes = {r["workload"]["dtype"] for r in doc["results"]}
    hw = doc["hardware"]
    return roofline.Roofline(
        title=f"The suite on {hw['name']}",
        points=placed,
        roofs=roofline.roofs(hw, dtypes, placed),
        left_out=len(doc["results"]) - len(placed),
    )


def _workload_section(page: Page, index: int, r: Mapping[str, Any]) -> None:
    wl = r["workload"]
    at = anchor(index, wl["name"])
    parts: list[Markup] = []
    if r.get("failure"):
        parts.append(f'<p class="error">failed: {text(r["failure"])}</p>')
        page.section(wl["name"], *parts, anchor=at)
        return
    totals, timing = r.get("totals") or {}, r.get("timing") or {}
    parts.append(
        fields(
            [
                ("batch size", Value(wl["batch_size"], Unit.INTEGER)),
                ("dtype", wl["dtype"]),
                ("parameters", Value(wl.get("parameter_count"), Unit.COUNT)),
                ("step", Value(r.get("step_s"), Unit.SECONDS)),
                ("samples/s", Value(timing.get("samples_per_s"), Unit.NUMBER, ",.1f")),
                ("speed of light", Value(totals.get("sol_time_s"), Unit.SECONDS)),
                ("of speed of light", Value(totals.get("efficiency"), Unit.FRACTION)),
                ("MFU", Value(totals.get("mfu"), Unit.FRACTION)),
                (
                    "work",
                    f"{units.count(totals.get('flops') or 0, 'FLOP')},"
                    f" {units.size(totals.get('bytes'))} moved",
                ),
                ("bound", r.get("bound")),
            ]
        )
    )
    medians = r.get("round_medians_s") or []
    charts = []
    if medians:
        charts.append(
            page.chart(
                "rounds",
                {
                    "data": [
                        {
                            "type": "scatter",
                            "mode": "markers+lines",
                            "name": "round median",
                            "x": list(range(1, len(medians) + 1)),
                            "y": medians,
                            "hovertemplate": "round %{x}: %{y:.3s}s<extra></extra>",
                        }
                    ],
                    "layout": {
                        "title": {"text": "Step time by round"},
                        "xaxis": {"title": {"text": "round"}, "dtick": 1},
                        "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
                        "height": 300,
                    },
                },
            )
        )
    if r.get("phases"):
        charts.append(page.chart("phases", phases_figure(r["phases"])))
    if r.get("memory"):
        charts += memory_charts(page, r["memory"])
    parts += charts
    parts.append("<h3>Findings</h3>" + findings(r.get("findings") or []))
    page.section(wl["name"], *parts, anchor=at)
