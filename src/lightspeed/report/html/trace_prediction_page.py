"""The HTML report of what-ifs predicted from a trace (`lightspeed predict --trace`), from
its JSON document: the changes, each step traced, replayed and predicted, the first step's
timeline replayed unchanged above the same step predicted, what the prediction assumes
and what was measured of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.report.html.markup import Column, Page, fields, notes
from lightspeed.report.html.trace_page import timeline_figure
from lightspeed.report.trace_whatif_report import STEP_CAPTION, STEP_COLUMNS, step_cells


def trace_prediction_page(doc: Mapping[str, Any]) -> Page:
    """The prediction's report."""
    page = Page("What-ifs from a trace")
    hardware = (
        doc["source"] if doc["source"] == doc["target"] else f"{doc['source']} → {doc['target']}"
    )
    changes = ", ".join(f"{k} {v}" for k, v in doc["changes"].items())
    page.section(
        "Summary",
        fields([("trace", doc["path"]), ("hardware", hardware), ("changes", changes)]),
        anchor="summary",
    )
    rows = [step_cells(s) for s in doc["steps"]]
    columns = tuple(Column(c.key, c.header, c.numeric) for c in STEP_COLUMNS)
    page.section("Steps", page.table(columns, rows, caption=STEP_CAPTION), anchor="steps")
    charts = []
    for which, title in (("replayed", "replayed unchanged"), ("predicted", "predicted")):
        timeline = doc["timelines"].get(which)
        if timeline is None:
            continue
        figure = timeline_figure(timeline)
        figure["layout"]["title"] = {"text": f"ProfilerStep#{timeline['step']}, {title}"}
        caption = (
            f"{timeline['events_kept']:,} of its {timeline['events_in_window']:,} tasks drawn"
            " (the longest); host threads above, device streams below."
        )
        charts.append(page.chart("timeline", figure, caption=caption))
    if charts:
        page.section("The first step, replayed and predicted", *charts, anchor="timelines")
    page.section(
        "Assumptions",
        notes(doc["assumptions"], title="What the prediction assumes"),
        notes(
            doc["validated"] or ["nothing: no benchmark measured these changes from a trace"],
            title="Validated",
        ),
        anchor="assumptions",
    )
    return page
