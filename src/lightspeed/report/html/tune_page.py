"""The HTML report of a tuning run, from its JSON document: the plain step, each
candidate's predicted and measured step time and peak memory side by side with its
equivalence check and outcome, a chart of predicted against measured, and how each
candidate was applied or why it was not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Cell, Column, Page, fields, label, notes

_COLUMNS = (
    Column("candidate", "candidate"),
    Column("predicted_step_s", "pred. step", numeric=True),
    Column("measured_step_s", "step", numeric=True),
    Column("speedup", "speed-up", numeric=True),
    Column("predicted_peak_bytes", "pred. peak", numeric=True),
    Column("measured_peak_bytes", "peak", numeric=True),
    Column("check", "check"),
    Column("outcome", "outcome"),
)


def tune_page(doc: Mapping[str, Any]) -> Page:
    """The tuning run's report."""
    plain = doc["plain"]
    candidates = doc["candidates"]
    page = Page(f"Tune: {doc['workload']['name']}")
    budget = doc.get("memory_budget_bytes")
    kept = doc.get("kept")
    page.section(
        "Summary",
        fields(
            [
                ("workload", str(doc["workload"]["name"])),
                ("plain step", Value(plain.get("step_time_s"), Unit.SECONDS)),
                ("plain peak", Value(plain.get("peak_bytes"), Unit.BYTES)),
                (
                    "memory budget",
                    Value(budget, Unit.BYTES) if budget is not None else "none",
                ),
                ("kept", str(kept) if kept else "nothing"),
            ]
        ),
        anchor="summary",
    )
    rows = [_row(c) for c in candidates]
    parts = [
        page.table(
            _COLUMNS,
            rows,
            caption="step, peak: measured (pred.: predicted before the candidate ran);"
            " speed-up: the plain step over the measured one; check: gradients bit for bit"
            " (checkpoint, gist) or the loss curve within the seed-to-seed spread (amp).",
            kind="tune",
        )
    ]
    compared = [c for c in candidates if c.get("measured_step_time_s") is not None]
    if compared:
        parts.append(
            page.chart(
                "tune-steps",
                _steps_figure(compared, plain.get("step_time_s")),
                caption="Each candidate's step time as predicted before it ran and as"
                " measured, beside the plain step's.",
            )
        )
    page.section("Candidates", *parts, anchor="candidates")
    reasons = [f"{c['name']}: {c['reason']}" for c in candidates if c.get("reason")]
    applied = [f"{c['name']}: {c['transform']}" for c in candidates if c.get("transform")]
    blocks = []
    if reasons:
        blocks.append(notes(reasons, title="Why not"))
    if applied:
        blocks.append(notes(applied, title="Applied as (lightspeed.optimize)"))
    if blocks:
        page.section("How", *blocks, anchor="how")
    return page


def _row(c: Mapping[str, Any]) -> list[Cell]:
    check = c.get("equivalence")
    return [
        str(c["name"]),
        Value(c.get("predicted_step_time_s"), Unit.SECONDS),
        Value(c.get("measured_step_time_s"), Unit.SECONDS),
        Value(c.get("speedup"), Unit.NUMBER, ".2f", "×"),
        Value(c.get("predicted_peak_bytes"), Unit.BYTES),
        Value(c.get("measured_peak_bytes"), Unit.BYTES),
        None if check is None else ("passed" if check.get("passed") else "failed"),
        str(c.get("verdict") or ""),
    ]


def _steps_figure(candidates: list[Mapping[str, Any]], plain_step: float | None) -> dict[str, Any]:
    names = [label(c["name"]) for c in candidates]
    bars = (
        ("predicted", "predicted_step_time_s", "#9aa9c9"),
        ("measured", "measured_step_time_s", "#2b59c3"),
    )
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": name,
            "x": names,
            "y": [c.get(key) for c in candidates],
            "marker": {"color": colour},
            "hovertemplate": "%{x}: %{y:.3s}s<extra>" + name + "</extra>",
        }
        for name, key, colour in bars
    ]
    shapes = []
    if plain_step:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": plain_step,
                "y1": plain_step,
                "line": {"dash": "dot", "color": "#555"},
            }
        )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Step time by candidate: predicted and measured (dotted: plain)"},
            "barmode": "group",
            "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
            "shapes": shapes,
            "height": 380,
        },
    }
