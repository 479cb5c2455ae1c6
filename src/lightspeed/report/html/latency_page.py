"""The HTML report of a latency profile (`lightspeed serve-profile`), from its JSON
document: latency and its tail against the batch size, throughput against latency (the
curve a serving plan picks its batch on), and the table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Cell, Column, Page, fields
from lightspeed.report.serving_report import (
    CAPTION,
    batch_cells,
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
    return page


def _line(x: list[int], y: list[float], name: str) -> dict[str, Any]:
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": name,
        "x": x,
        "y": y,
        "hovertemplate": f"batch %{{x}}: %{{y:.3s}}s ({name})<extra></extra>",
    }
