"""The HTML report of a latency profile (`lightspeed serve-profile`), from its JSON
document: latency and its tail against the batch size, throughput against latency (the
curve a serving plan picks its batch on), and the table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.facts.serving import LatencyProfile
from lightspeed.report.html.markup import Cell, Column, Markup, Page, fields, notes
from lightspeed.report.html.profile_page import carried_parts, validated_text
from lightspeed.report.serving_report import (
    CAPTION,
    FORECAST_CAPTION,
    FORECAST_COLUMNS,
    SPREAD_ASSUMPTION,
    batch_cells,
    forecast_cells,
    forecast_changes,
    latency_columns,
    latency_from_data,
)


def latency_page(doc: Mapping[str, Any]) -> Page:
    """The latency profile's report."""
    profile = latency_from_data(doc["latency"])
    best = max(profile.batches, key=lambda b: b.throughput_per_s)
    page = Page(f"Latency profile: {profile.name}")
    page.section(
        "Summary",
        fields(
            [
                ("model", f"{profile.name}: forward only, inference mode"),
                ("device", f"{profile.device}, {profile.threads} thread(s)"),
                ("hardware", profile.hardware_id),
                ("batch sizes", ", ".join(str(b.batch_size) for b in profile.batches)),
                (
                    "best throughput",
                    Value(
                        best.throughput_per_s,
                        Unit.COUNT,
                        suffix=f" samples/s at batch {best.batch_size}",
                    ),
                ),
            ]
        ),
        anchor="summary",
    )
    sizes = [b.batch_size for b in profile.batches]
    latency = page.chart(
        "latency",
        {
            "data": [
                _line(sizes, [b.median_s for b in profile.batches], "median"),
                _line(sizes, [b.p99_s for b in profile.batches], "p99"),
            ],
            "layout": {
                "title": {"text": "Latency by batch size"},
                "xaxis": {"title": {"text": "batch size"}, "type": "log"},
                "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
                "height": 340,
            },
        },
    )
    curve = page.chart(
        "throughput",
        {
            "data": [
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "x": [b.median_s for b in profile.batches],
                    "y": [b.throughput_per_s for b in profile.batches],
                    "text": [f"batch {b}" for b in sizes],
                    "hovertemplate": "%{text}: %{x:.3s}s, %{y:.3s} samples/s<extra></extra>",
                }
            ],
            "layout": {
                "title": {"text": "Throughput against latency"},
                "xaxis": {"title": {"text": "median latency (s)"}, "exponentformat": "SI"},
                "yaxis": {"title": {"text": "samples/s"}, "exponentformat": "SI"},
                "height": 340,
            },
        },
    )
    columns = latency_columns(profile)
    rows: list[list[Cell]] = [list(batch_cells(b)[: len(columns)]) for b in profile.batches]
    table = page.table(
        tuple(Column(c.key, c.header, c.numeric) for c in columns),
        rows,
        caption=CAPTION,
        kind="latency",
    )
    page.section("Latency by batch size", latency, curve, table, anchor="latency")
    if doc.get("predicted"):
        page.section("Prediction", *_forecast(page, profile, doc["predicted"]), anchor="prediction")
    return page


def _forecast(page: Page, measured: LatencyProfile, forecast: Mapping[str, Any]) -> list[Markup]:
    """ℓ(b) predicted on other hardware or in another precision: beside the measured one,
    as a table, with the rules, assumptions and kinds of op carried over."""
    predicted = latency_from_data(forecast["latency"])
    made = forecast["prediction"]
    change = forecast_changes(made.get("changes") or {})
    sizes = [b.batch_size for b in measured.batches]
    on, source = predicted.hardware_id, measured.hardware_id
    chart = page.chart(
        "prediction",
        {
            "data": [
                _line(sizes, [b.median_s for b in measured.batches], f"median on {source}"),
                _line(sizes, [b.median_s for b in predicted.batches], f"median on {on}"),
                _line(sizes, [b.p99_s for b in predicted.batches], f"p99 on {on}"),
            ],
            "layout": {
                "title": {"text": f"Latency measured on {source}, predicted on {on}"},
                "xaxis": {"title": {"text": "batch size"}, "type": "log"},
                "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI", "type": "log"},
                "height": 340,
            },
        },
    )
    rows: list[list[Cell]] = [
        list(forecast_cells(b, scale))
        for b, scale in zip(predicted.batches, forecast["scales"], strict=True)
    ]
    table = page.table(
        tuple(Column(c.key, c.header, c.numeric) for c in FORECAST_COLUMNS),
        rows,
        caption=FORECAST_CAPTION,
        kind="predicted-latency",
    )
    return [
        fields(
            [
                ("predicted with", change),
                ("from", f"ℓ(b) measured on {source}"),
                ("validated", validated_text(made)),
            ]
        ),
        chart,
        table,
        notes(list(made.get("rules") or []), title="Rules"),
        notes([SPREAD_ASSUMPTION, *(made.get("assumptions") or [])], title="Assumptions"),
        *carried_parts(page, made),
    ]


def _line(x: list[int], y: list[float], name: str) -> dict[str, Any]:
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": name,
        "x": x,
        "y": y,
        "hovertemplate": f"batch %{{x}}: %{{y:.3s}}s ({name})<extra></extra>",
    }
