"""The HTML report of what-ifs predicted from a trace (`lightspeed predict --trace`), from
its JSON document: the changes, each step traced, replayed and predicted, the first step's
timeline as traced, replayed unchanged and predicted, one above the other, what the
prediction assumes and what was measured of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import Unit, Value
from lightspeed.report.html.markup import Column, Page, fields, notes
from lightspeed.report.html.trace_page import timeline_caption, timeline_figure
from lightspeed.report.html.trace_steps import table_rows
from lightspeed.report.steps_shown import shown_indices
from lightspeed.report.trace_whatif_report import STEP_CAPTION, STEP_COLUMNS, step_cells


def trace_prediction_page(doc: Mapping[str, Any]) -> Page:
    """The prediction's report: a part per rank."""
    ranks = doc["ranks"]
    page = Page("What-ifs from a trace" if len(ranks) == 1 else f"What-ifs from {len(ranks)} ranks")
    for i, rank in enumerate(ranks):
        _rank(page, rank, "" if len(ranks) == 1 else f" (rank {rank.get('rank', i)})", i)
    return page


def _rank(page: Page, doc: Mapping[str, Any], which: str, index: int) -> None:
    source, target = doc["source"], doc["target"]
    hardware = source if source == target else f"{source} → {target}"
    changes = ", ".join(f"{k} {v}" for k, v in doc["changes"].items())
    page.section(
        f"Summary{which}",
        fields([("trace", doc["path"]), ("hardware", hardware), ("changes", changes)]),
        anchor=f"summary-{index}",
    )
    steps = doc["steps"]
    # A long trace's table lists its first and last steps and the slowest predicted.
    predicted = [s["predicted_s"] for s in steps]
    most, ends, slowest = table_rows()
    listed = shown_indices(predicted, most, ends, slowest)
    rows = [("…",) * len(STEP_COLUMNS) if i is None else step_cells(steps[i]) for i in listed]
    caption = STEP_CAPTION
    if len(listed) < len(steps):
        caption = (
            f"of {len(steps):,} steps, the first and last {ends} and the {slowest}"
            f" slowest predicted (every step is in the JSON). {caption}"
        )
    columns = tuple(Column(c.key, c.header, c.numeric) for c in STEP_COLUMNS)
    page.section(
        f"Steps{which}", page.table(columns, rows, caption=caption), anchor=f"steps-{index}"
    )
    device = page.table(
        (
            Column("what", "kind or stream"),
            Column("replayed_s", "replayed", numeric=True),
            Column("predicted_s", "predicted", numeric=True),
        ),
        [
            (what, Value(before, Unit.SECONDS), Value(after, Unit.SECONDS))
            for what, before, after in doc["device_time"]
        ],
        caption="the time of the device tasks the steps launched, summed over the steps"
        " (overlaps not merged)",
    )
    page.section(f"Device time of the steps{which}", device, anchor=f"device-{index}")
    charts = []
    # One time axis for all, so that the predicted step reads against the others.
    longest = max((t["duration_s"] for t in doc["timelines"].values()), default=0.0)
    for key, title in (
        ("traced", "traced"),
        ("replayed", "replayed unchanged"),
        ("predicted", "predicted"),
    ):
        timeline = doc["timelines"].get(key)
        if timeline is None:
            continue
        figure = timeline_figure(timeline)
        figure["layout"]["title"] = {"text": f"ProfilerStep#{timeline['step']}, {title}"}
        figure["layout"]["xaxis"]["range"] = [0, longest]
        charts.append(page.chart("timeline", figure, caption=timeline_caption(timeline)))
    if charts:
        page.section(
            f"The first step: traced, replayed and predicted{which}",
            *charts,
            anchor=f"timelines-{index}",
        )
    page.section(
        f"Assumptions{which}",
        notes(doc["assumptions"], title="What the prediction assumes"),
        notes(
            doc["validated"] or ["nothing: no benchmark measured these changes from a trace"],
            title="Validated",
        ),
        anchor=f"assumptions-{index}",
    )
