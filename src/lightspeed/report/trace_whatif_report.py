"""The report of what-ifs predicted from a trace (`lightspeed predict --trace`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed.document import Column, Document, Fields, Notes, Section, Table, Unit, Value, line
from lightspeed.report.steps_shown import SHOWN_STEPS, percentiles_caption, shown_indices, shown_of
from lightspeed.report.trace_report import timeline_data
from lightspeed.trace.whatif import TracePrediction

DOCUMENT = "trace-prediction"


STEP_COLUMNS = (
    Column("number", "step", numeric=True),
    Column("traced_s", "traced", numeric=True),
    Column("replayed_s", "replayed", numeric=True),
    Column("predicted_s", "predicted", numeric=True),
    Column("speedup", "replayed / predicted", numeric=True),
    Column("predicted_busy_s", "device busy, predicted", numeric=True, optional=True),
)
STEP_CAPTION = (
    "replayed: the step's dependency graph run again unchanged, the baseline; predicted:"
    " the same graph changed. A traced step bound by its host is longer than the same step"
    " without the profiler."
)


def step_cells(step: Mapping[str, Any]) -> tuple[Value, ...]:
    """One step's row of `STEP_COLUMNS`, from its JSON object."""
    return (
        Value(step["number"], Unit.INTEGER),
        Value(step["traced_s"], Unit.SECONDS),
        Value(step["replayed_s"], Unit.SECONDS),
        Value(step["predicted_s"], Unit.SECONDS),
        Value(step["speedup"], Unit.NUMBER, ".2f", "×"),
        Value(step["predicted_busy_s"], Unit.SECONDS),
    )


def trace_prediction_document(predictions: Sequence[TracePrediction]) -> Document:
    """Each rank's steps traced, replayed unchanged and predicted with the changes; what
    each change assumes, and which were measured (one section per trace)."""
    ranks = [_data(p) for p in predictions]
    sections = tuple(
        _section(p, r["steps"], len(predictions)) for p, r in zip(predictions, ranks, strict=True)
    )
    return Document(kind=DOCUMENT, data={"ranks": ranks}, sections=sections)


def _data(p: TracePrediction) -> dict[str, Any]:
    """One rank's prediction as JSON: its timelines drawn as `lightspeed trace` draws one."""
    steps = [dataclasses.asdict(s) | {"speedup": s.speedup} for s in p.steps]
    timelines = {k: timeline_data(t) for k, t in p.timelines.items()}
    return dataclasses.asdict(dataclasses.replace(p, timelines={})) | {
        "steps": steps,
        "timelines": timelines,
    }


def _section(p: TracePrediction, steps: list[dict[str, Any]], ranks: int) -> Section:
    changes = ", ".join(f"{k} {v}" for k, v in p.changes.items())
    facts = [
        ("trace", line(p.path)),
        ("hardware", line(p.source if p.source == p.target else f"{p.source} → {p.target}")),
        ("changes", line(changes)),
    ]
    if p.carried_s > 0:
        facts.append(
            (
                "carried by time alone",
                line(
                    Value(p.by_time_s / p.carried_s, Unit.FRACTION),
                    " of the kernels' time (no shapes recorded for it)",
                ),
            )
        )
    # A long trace lists a few steps here (the slowest predicted among them); JSON and
    # HTML keep every step.
    predicted = [s["predicted_s"] for s in steps]
    caption = STEP_CAPTION
    if len(steps) > SHOWN_STEPS:
        caption = (
            f"{shown_of(len(steps))} predicted; predicted"
            f" {percentiles_caption(predicted)}; every step is in --json and --html. "
            + STEP_CAPTION
        )
    table = Table(
        title="Steps: traced, replayed unchanged, predicted",
        columns=STEP_COLUMNS,
        rows=tuple(
            ("…",) * len(STEP_COLUMNS) if i is None else step_cells(steps[i])
            for i in shown_indices(predicted)
        ),
        caption=caption,
    )
    device = Table(
        title="Device time of the steps: by kind and by stream",
        columns=(
            Column("what", "kind or stream"),
            Column("replayed_s", "replayed", numeric=True),
            Column("predicted_s", "predicted", numeric=True),
        ),
        rows=tuple(
            (what, Value(before, Unit.SECONDS), Value(after, Unit.SECONDS))
            for what, before, after in p.device_time
        ),
        caption="the time of the device tasks the steps launched, summed over the steps"
        " (overlaps not merged)",
    )
    notes = Notes(p.assumptions, title="What the prediction assumes")
    validated = Notes(
        p.validated or ("nothing: no benchmark measured these changes from a trace",),
        title="Validated",
    )
    title = "Predicted from a trace"
    if ranks > 1:
        title += f": rank {p.rank if p.rank is not None else '?'} of {ranks}, joined"
    return Section(title, (Fields(tuple(facts)), table, device, notes, validated))
