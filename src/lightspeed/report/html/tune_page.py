"""The HTML report of a tuning run, from its JSON document: the plain step, each
candidate's predicted and measured step time and peak memory side by side with its
equivalence check and outcome, a chart of predicted against measured, and how each
candidate was applied or why it was not. The tables' headings and captions are the
terminal report's (`report/tune_report.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.facts.tuning import CandidateKind, kind_named
from lightspeed.report.html.markup import Cell, Column, Page, fields, label, notes
from lightspeed.report.tune_report import (
    APPLIED_AS,
    COLUMNS,
    LOADER_CAPTION,
    LOADER_COLUMNS,
    NO_LOADER,
    PLAN_COLUMNS,
    PLANS_CAPTION,
    PLANS_TITLE,
    TO_PAD,
    WHY_NOT,
    candidates_caption,
    loader_setting,
    plan_cells,
    plan_kind,
)

_COLUMNS = tuple(Column(c.key, c.header, c.numeric) for c in COLUMNS)
_LOADER_COLUMNS = tuple(Column(c.key, c.header, c.numeric) for c in LOADER_COLUMNS)


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
            caption=candidates_caption(
                any(kind_named(str(c["name"])) is CandidateKind.FUSE for c in candidates)
            ),
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
    pads = [f"{c['name']}: {text}" for c in candidates for text in c.get("suggestions") or ()]
    blocks = []
    if reasons:
        blocks.append(notes(reasons, title=WHY_NOT))
    if pads:
        blocks.append(notes(pads, title=TO_PAD))
    if applied:
        blocks.append(notes(applied, title=APPLIED_AS))
    if blocks:
        page.section("How", *blocks, anchor="how")
    _plans_section(page, doc.get("checkpoint_plans") or [])
    _loading_section(page, doc.get("loading"))
    return page


def _plans_section(page: Page, plans: list[Mapping[str, Any]]) -> None:
    """The checkpoint planner's options: the table, and each option's peak against its
    recompute time, whole blocks and op-level recomputation apart."""
    if not plans:
        return
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for plan in plans:
        by_kind.setdefault(plan_kind(plan["modules"]), []).append(plan)
    figure = {
        "data": [
            {
                "type": "scatter",
                "mode": "markers",
                "name": kind,
                "x": [p["recompute_s"] for p in group],
                "y": [p["peak_bytes"] for p in group],
                "text": [label(", ".join(p["modules"]) or "plain") for p in group],
                "marker": {"size": [14 if p["chosen"] else 8 for p in group]},
                "hovertemplate": "%{text}<br>recompute %{x:.3s}s, peak %{y:.3s}B<extra></extra>",
            }
            for kind, group in sorted(by_kind.items())
        ],
        "layout": {
            "title": {"text": "Each option's peak against its recompute time"},
            "xaxis": {"title": {"text": "recompute (s)"}, "exponentformat": "SI"},
            "yaxis": {"title": {"text": "peak (bytes)"}, "exponentformat": "SI"},
            "height": 360,
        },
    }
    page.section(
        PLANS_TITLE,
        page.table(
            [Column(c.key, c.header, c.numeric) for c in PLAN_COLUMNS],
            [plan_cells(dict(p)) for p in plans],
            caption=PLANS_CAPTION,
            kind="plans",
        ),
        page.chart("plans", figure, caption="The chosen option is the larger marker."),
        anchor="plans",
    )


def _loading_section(page: Page, loading: Mapping[str, Any] | None) -> None:
    """The loader's settings as measured and the loop's diagnosis before and after;
    one line when it was not tuned."""
    if loading is None or "runs" not in loading:
        why = (loading or {}).get("error") or NO_LOADER
        page.section("Data loading", fields([("data loading", str(why))]), anchor="loading")
        return
    runs = loading["runs"]
    kept = runs[loading["kept"]]
    summary = fields(
        [
            ("kept", loader_setting(kept["setting"], kept["threads"])),
            ("wait removed", Value(loading.get("wait_removed"), Unit.FRACTION)),
            ("bound before", str(loading["bound_before"])),
            ("bound after", str(loading["bound_after"])),
            ("CPU cores", Value(loading.get("cpu_cores"), Unit.INTEGER)),
        ]
    )
    rows: list[list[Cell]] = [
        [
            loader_setting(run["setting"], run["threads"]),
            Value(run.get("wait_s"), Unit.SECONDS),
            Value(run.get("compute_s"), Unit.SECONDS),
            Value(run.get("predicted_loop_s"), Unit.SECONDS),
            Value(run.get("loop_s"), Unit.SECONDS),
            Value(run.get("samples_per_s"), Unit.NUMBER, ".0f"),
            Value(run.get("first_batch_s"), Unit.SECONDS),
            "kept" if i == loading["kept"] else "",
        ]
        for i, run in enumerate(runs)
    ]
    parts = [
        summary,
        page.table(
            _LOADER_COLUMNS,
            rows,
            caption=LOADER_CAPTION,
            kind="loading",
        ),
        page.chart(
            "loading-loop",
            _loading_figure(runs),
            caption="Each setting's time a step, split into the wait for data and the step.",
        ),
    ]
    if loading.get("note"):
        parts.append(notes([str(loading["note"])], title="Note"))
    page.section("Data loading", *parts, anchor="loading")


def _loading_figure(runs: list[Mapping[str, Any]]) -> dict[str, Any]:
    names = [label(f"{r['setting']} · {r.get('threads')} thr.") for r in runs]
    parts = (("wait for data", "wait_s", "#d9822b"), ("step", "compute_s", "#2b59c3"))
    return {
        "data": [
            {
                "type": "bar",
                "name": name,
                "x": names,
                "y": [r.get(key) for r in runs],
                "marker": {"color": colour},
                "hovertemplate": "%{x}: %{y:.3s}s<extra>" + name + "</extra>",
            }
            for name, key, colour in parts
        ],
        "layout": {
            "title": {"text": "Time a step by DataLoader setting"},
            "barmode": "stack",
            "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
            "height": 380,
        },
    }


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
