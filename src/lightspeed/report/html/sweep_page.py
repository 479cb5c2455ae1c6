"""The HTML report of a sweep, from its JSON document: the search and its best trial,
the fused sweep's wall time beside the serial sweep's, every trial's loss against each
hyper-parameter, and the trials table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Cell, Column, Markup, Page, fields, label, notes
from lightspeed.report.sweep_report import params_text, serial_note, trial_cells, trial_columns


def sweep_page(doc: Mapping[str, Any]) -> Page:
    """The sweep's report."""
    trials = doc["trials"]
    names = [text.split("=", 1)[0] for text in doc["space"]]
    best = next((t for t in trials if t["number"] == doc["best"]), None)
    page = Page(f"Sweep: {doc['workload']['name']}")
    page.section(
        "Summary",
        fields(
            [
                ("workload", str(doc["workload"]["name"])),
                *([("stopped", str(doc["failure"]))] if doc.get("failure") else []),
                ("search space", " ".join(doc["space"])),
                ("trials", Value(len(trials), Unit.INTEGER)),
                ("steps a trial", Value(doc["steps"], Unit.INTEGER)),
                ("fused at a time", Value(doc["k"], Unit.INTEGER)),
                ("diverged", Value(sum(t["loss"] is None for t in trials), Unit.INTEGER)),
                ("sampler", f"{doc['sampler']}, seed {doc['seed']}"),
                (
                    "best",
                    f"trial {best['number']}: {params_text(best['params'])}, loss"
                    f" {best['loss']:.4g}"
                    if best is not None
                    else "none: every trial diverged",
                ),
                ("wall time", Value(doc["wall_s"], Unit.SECONDS)),
                ("serial sweep", Value(doc.get("serial_estimate_s"), Unit.SECONDS)),
                ("speed-up", Value(doc.get("speedup"), Unit.NUMBER, ".2f", suffix="×")),
            ]
        ),
        anchor="summary",
    )
    parts: list[Markup] = []
    if doc.get("serial_estimate_s") is not None:
        parts.append(page.chart("sweep-time", _time_figure(doc)))
    if doc.get("serial") is not None:
        parts.append(notes([serial_note(doc)], title="The serial sweep, measured"))
    if parts:
        page.section("Fused against serial", *parts, anchor="time")
    finished = [t for t in trials if t["loss"] is not None]
    charts = [
        page.chart(f"sweep-{name}", _loss_figure(finished, name, doc["best"]))
        for name in names
        if finished
    ]
    rows: list[list[Cell]] = [list(trial_cells(t, names, doc["best"])) for t in trials]
    columns = tuple(Column(c.key, c.header, c.numeric) for c in trial_columns(names))
    table = page.table(
        columns,
        rows,
        caption="loss: each trial's training loss at its last step; group: the fused job"
        " that trained it; diverged: a loss or gradient that was not finite.",
        kind="sweep",
    )
    page.section("Trials", *charts, table, anchor="trials")
    return page


def _time_figure(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "data": [
            {
                "type": "bar",
                "x": [
                    label("trials one at a time (estimated)"),
                    label(f"{doc['k']} at a time, fused"),
                ],
                "y": [doc["serial_estimate_s"], doc["wall_s"]],
                "marker": {"color": ["#8a8f98", "#2b59c3"]},
                "hovertemplate": "%{x}: %{y:.3s}s<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": "The sweep's wall time"},
            "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
            "height": 320,
        },
    }


def _loss_figure(trials: list[Mapping[str, Any]], name: str, best: int | None) -> dict[str, Any]:
    """Each finished trial's final loss against hyper-parameter `name`, the best marked."""
    values = [t["params"].get(name) for t in trials]
    numeric = all(isinstance(v, (int, float)) for v in values)
    positive = numeric and all(v > 0 for v in values)
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "markers",
                "x": values,
                "y": [t["loss"] for t in trials],
                "text": [label(f"trial {t['number']}") for t in trials],
                "marker": {
                    "size": [12 if t["number"] == best else 7 for t in trials],
                    "color": ["#e6a23c" if t["number"] == best else "#2b59c3" for t in trials],
                },
                "hovertemplate": "%{text}: "
                + label(name)
                + " %{x:.4g}, loss %{y:.4g}<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": f"Final loss against {label(name)}"},
            "xaxis": {"title": {"text": label(name)}, "type": "log" if positive else "linear"},
            "yaxis": {"title": {"text": "loss"}, "type": "log"},
            "height": 340,
        },
    }
