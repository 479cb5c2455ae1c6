"""The report of `lightspeed tune`: each candidate's predicted and measured step time and
peak memory side by side, its equivalence check and its verdict; the one kept."""

from __future__ import annotations

import dataclasses
from typing import Any

from lightspeed.document import (
    Column,
    Document,
    Fields,
    Notes,
    Section,
    Span,
    Style,
    Table,
    Unit,
    Value,
    line,
)
from lightspeed.facts.tuning import Candidate, Tuning
from lightspeed.report.timing_report import workload_data

DOCUMENT = "tune"

COLUMNS = (
    Column("candidate", "candidate"),
    Column("predicted_step_s", "pred. step", numeric=True),
    Column("measured_step_s", "step", numeric=True),
    Column("speedup", "speed-up", numeric=True),
    Column("predicted_peak_bytes", "pred. peak", numeric=True, optional=True),
    Column("measured_peak_bytes", "peak", numeric=True),
    Column("equivalence", "check"),
    Column("verdict", "outcome"),
)


def tune_document(tuning: Tuning) -> Document:
    """The candidates' table under the plain step's figures, the reasons of those that
    did not count, and how each was applied."""
    base = tuning.baseline
    step = base.step_time_s
    peak = base.memory.peak_bytes if base.memory is not None else None
    chosen = tuning.chosen
    summary = Fields(
        (
            ("workload", line(base.workload.name)),
            ("plain step", line(Value(step, Unit.SECONDS), ", peak ", Value(peak, Unit.BYTES))),
            (
                "memory budget",
                line(
                    Value(tuning.memory_budget_bytes, Unit.BYTES)
                    if tuning.memory_budget_bytes is not None
                    else "none: the fastest equivalent candidate is kept"
                ),
            ),
            (
                "kept",
                line(
                    Value(f"{chosen.name}: {chosen.transform}", style=Style.BOLD)
                    if chosen is not None
                    else "nothing: no candidate was equivalent and faster (or fit the budget)"
                ),
            ),
        )
    )
    table = Table(
        title="Candidates: predicted, then applied, checked and measured",
        columns=COLUMNS,
        rows=tuple(_row(c, step) for c in tuning.candidates),
        caption="step, peak: measured (pred.: predicted before it ran); speed-up: the plain step"
        " over the measured one; check: gradients bit for bit (checkpoint, gist) or the loss"
        " curve within the seed-to-seed spread (amp)",
        framed=True,
    )
    blocks: list[Any] = [summary, table]
    reasons = tuple(f"{c.name}: {c.reason}" for c in tuning.candidates if c.reason)
    if reasons:
        blocks.append(Notes(reasons, title="Why not"))
    applied = tuple(f"{c.name}: {c.transform}" for c in tuning.candidates if c.transform)
    if applied:
        blocks.append(Notes(applied, title="Applied as (lightspeed.optimize)"))
    return Document(
        kind=DOCUMENT,
        data=tune_data(tuning),
        sections=(Section("Tune", tuple(blocks)),),
    )


def tune_data(tuning: Tuning) -> dict[str, Any]:
    """The JSON body of a tuning run."""
    base = tuning.baseline
    return {
        "workload": workload_data(base.workload),
        "plain": {
            "step_time_s": base.step_time_s,
            "peak_bytes": base.memory.peak_bytes if base.memory is not None else None,
        },
        "memory_budget_bytes": tuning.memory_budget_bytes,
        "candidates": [_candidate_data(c, base.step_time_s) for c in tuning.candidates],
        "kept": tuning.chosen.name if tuning.chosen is not None else None,
    }


def _candidate_data(c: Candidate, plain_step: float | None) -> dict[str, Any]:
    return {
        "name": c.name,
        "transform": c.transform,
        "predicted_step_time_s": c.predicted_step_s,
        "predicted_peak_bytes": c.predicted_peak_bytes,
        "measured_step_time_s": c.measured_step_s,
        "measured_peak_bytes": c.measured_peak_bytes,
        "speedup": speedup(plain_step, c.measured_step_s),
        "equivalence": None if c.equivalence is None else dataclasses.asdict(c.equivalence),
        "verdict": c.verdict,
        "reason": c.reason,
    }


_VERDICT_STYLES = {
    "kept": Style.BOLD,
    "failed check": Style.ERROR,
    "error": Style.ERROR,
    "over budget": Style.WARNING,
}


def speedup(plain_step: float | None, measured_step: float | None) -> float | None:
    """The plain step's time over a candidate's measured one (None: either unknown)."""
    return plain_step / measured_step if plain_step and measured_step else None


def _row(c: Candidate, plain_step: float | None) -> tuple[Span, ...]:
    check = c.equivalence
    return (
        c.name,
        Value(c.predicted_step_s, Unit.SECONDS),
        Value(c.measured_step_s, Unit.SECONDS),
        Value(speedup(plain_step, c.measured_step_s), Unit.NUMBER, ".2f", "×"),
        Value(c.predicted_peak_bytes, Unit.BYTES),
        Value(c.measured_peak_bytes, Unit.BYTES),
        "—"
        if check is None
        else Value(
            "passed" if check.passed else "failed",
            style=Style.PLAIN if check.passed else Style.ERROR,
        ),
        Value(c.verdict, style=_VERDICT_STYLES.get(c.verdict, Style.PLAIN)),
    )
