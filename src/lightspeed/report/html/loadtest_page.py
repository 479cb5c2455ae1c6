"""The HTML report of a load test (`lightspeed loadgen`), from its JSON document: what was
driven and the outcome, latency (p50, p90, p99) against throughput over the runs with the
SLO across it, throughput and goodput against the offered rate beside the ideal y = x
(a search's probes marked passing or failing), and the table of runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed.report.html.markup import Cell, Column, Page, fields, label
from lightspeed.report.loadtest_report import (
    caption,
    is_search,
    run_columns,
    run_rows,
    runs_in_order,
    summary_text,
    target_name,
)

PERCENTILES = (
    ("p50_s", "p50", "#2b59c3"),
    ("p90_s", "p90", "#e69f00"),
    ("p99_s", "p99", "#c0392b"),
)


def loadtest_page(doc: Mapping[str, Any]) -> Page:
    """The load test's report."""
    load = doc["load"]
    ordered = runs_in_order(load)
    runs = [run for run, _ in ordered]
    page = Page(f"Load test: {target_name(load['target'])}")
    page.section("Summary", fields(summary_text(load)), anchor="summary")
    curve = page.chart(
        "latency-throughput",
        _latency_figure(runs, float(load["slo_s"])),
        caption="each point a run; latency counts from each request's scheduled time",
    )
    rates = page.chart(
        "goodput",
        _goodput_figure(ordered, search=is_search(load)),
        caption="on the dotted line every offered request is answered (within the SLO, for"
        " goodput)",
    )
    rows: list[list[Cell]] = [list(r) for r in run_rows(load)]
    table = page.table(
        tuple(Column(c.key, c.header, c.numeric) for c in run_columns(load)),
        rows,
        caption=caption(load),
        kind="runs",
    )
    page.section("Latency against throughput", curve, anchor="latency")
    page.section("Goodput against offered load", rates, anchor="goodput")
    page.section("Runs", table, anchor="runs")
    return page


def _latency_figure(runs: Sequence[Mapping[str, Any]], slo_s: float) -> dict[str, Any]:
    """p50, p90 and p99 against throughput, by throughput, with the SLO across."""
    by_throughput = sorted(runs, key=lambda r: r["throughput_per_s"])
    x = [r["throughput_per_s"] for r in by_throughput]
    offered = [f"offered {r['offered_rate_per_s']:,.1f} req/s" for r in by_throughput]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": x,
            "y": [r[key] for r in by_throughput],
            "text": offered,
            "line": {"color": color},
            "hovertemplate": f"%{{text}}: %{{x:.4s}} req/s, {name} %{{y:.3s}}s<extra></extra>",
        }
        for key, name, color in PERCENTILES
    ]
    span = [min(x, default=0.0), max(x, default=1.0)]
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "SLO",
            "x": span,
            "y": [slo_s, slo_s],
            "line": {"color": "#555", "dash": "dash"},
            "hovertemplate": f"SLO {slo_s:.3g} s<extra></extra>",
        }
    )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Latency against throughput"},
            "xaxis": {"title": {"text": "throughput (req/s)"}, "exponentformat": "SI"},
            "yaxis": {"title": {"text": "seconds"}, "type": "log", "exponentformat": "SI"},
            "height": 360,
        },
    }


def _goodput_figure(
    ordered: Sequence[tuple[Mapping[str, Any], bool | None]], *, search: bool
) -> dict[str, Any]:
    """Throughput and goodput against the offered rate, with y = x; a search's probes
    marked by whether they reached the target."""
    by_offered = sorted(ordered, key=lambda item: item[0]["offered_rate_per_s"])
    x = [r["offered_rate_per_s"] for r, _ in by_offered]
    top = max([*x, *(r["throughput_per_s"] for r, _ in by_offered)], default=1.0)
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "ideal (y = x)",
            "x": [0, top],
            "y": [0, top],
            "line": {"color": "#999", "dash": "dot"},
            "hoverinfo": "skip",
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "throughput",
            "x": x,
            "y": [r["throughput_per_s"] for r, _ in by_offered],
            "line": {"color": "#2b59c3"},
            "hovertemplate": "offered %{x:.4s} req/s: %{y:.4s} OK/s<extra></extra>",
        },
    ]
    goodput: dict[str, Any] = {
        "type": "scatter",
        "mode": "lines+markers",
        "name": "goodput",
        "x": x,
        "y": [r["goodput_per_s"] for r, _ in by_offered],
        "line": {"color": "#1b9e77"},
        "hovertemplate": "offered %{x:.4s} req/s: %{y:.4s} within the SLO/s<extra></extra>",
    }
    if search:
        verdicts = ["pass" if passed else "fail" for _, passed in by_offered]
        goodput["name"] = "goodput (probes: ● pass, ✕ fail)"
        goodput["text"] = [label(v) for v in verdicts]
        goodput["marker"] = {
            "symbol": ["circle" if v == "pass" else "x" for v in verdicts],
            "size": 10,
        }
        goodput["hovertemplate"] = (
            "probe at %{x:.4s} req/s (%{text}): %{y:.4s} within the SLO/s<extra></extra>"
        )
    data.append(goodput)
    return {
        "data": data,
        "layout": {
            "title": {"text": "Goodput and throughput against offered load"},
            "xaxis": {"title": {"text": "offered (req/s)"}, "exponentformat": "SI"},
            "yaxis": {"title": {"text": "req/s"}, "exponentformat": "SI"},
            "height": 360,
        },
    }
