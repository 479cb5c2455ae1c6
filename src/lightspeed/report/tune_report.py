"""The report of `lightspeed tune`: each candidate's predicted and measured step time and
peak memory side by side, its equivalence check and its verdict; the one kept.

The column headings, captions and titles are the HTML report's too
(`report/html/tune_page.py` draws the same tables from the JSON document)."""

from __future__ import annotations

import dataclasses
import re
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
from lightspeed.facts.tuning import Candidate, CandidateKind, Tuning, Verdict
from lightspeed.report.timing_report import workload_data
from lightspeed.rules import speedup

DOCUMENT = "tune"

# In a narrow terminal the candidate's name is cut, the predicted peak left out, and the
# check with it: the outcome says as much ("failed check"; a candidate that was skipped
# or failed to run was never checked), so headings and figures stay whole.
COLUMNS = (
    Column("candidate", "candidate", shrink=True),
    Column("predicted_step_s", "pred. step", numeric=True),
    Column("measured_step_s", "step", numeric=True),
    Column("speedup", "speed-up", numeric=True),
    Column("predicted_peak_bytes", "pred. peak", numeric=True, optional=True),
    Column("measured_peak_bytes", "peak", numeric=True),
    Column("equivalence", "check", optional=True),
    Column("verdict", "outcome"),
)
CANDIDATES_TITLE = "Candidates: predicted, then applied, checked and measured"
WHY_NOT = "Why not"
TO_PAD = "Shapes to pad (by hand)"
APPLIED_AS = "Applied as (lightspeed.optimize)"


def candidates_caption(fused: bool) -> str:
    """The candidates table's caption; `fused`: a fuseK row is in it, whose figures are
    a job's share."""
    return (
        "step, peak: measured (pred.: predicted before it ran); speed-up: the plain step"
        " over the measured one; check: gradients bit for bit (checkpoint, gist) or the loss"
        " curve within the seed-to-seed spread (amp)"
        + (
            "; fuseK: step is a job's share of the fused step (K jobs a step), peak the K"
            " jobs', check each job's loss fused against alone"
            if fused
            else ""
        )
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
                    else _nothing_kept(tuning)
                ),
            ),
        )
    )
    table = Table(
        title=CANDIDATES_TITLE,
        columns=COLUMNS,
        rows=tuple(_row(c, step) for c in tuning.candidates),
        caption=candidates_caption(any(c.kind is CandidateKind.FUSE for c in tuning.candidates)),
        framed=True,
    )
    blocks: list[Any] = [summary, table] if tuning.candidates else [summary]
    reasons = tuple(f"{c.name}: {c.reason}" for c in tuning.candidates if c.reason)
    if reasons:
        blocks.append(Notes(reasons, title=WHY_NOT))
    pads = tuple(f"{c.name}: {text}" for c in tuning.candidates for text in c.suggestions)
    if pads:
        blocks.append(Notes(pads, title=TO_PAD))
    applied = tuple(f"{c.name}: {c.transform}" for c in tuning.candidates if c.transform)
    if applied:
        blocks.append(Notes(applied, title=APPLIED_AS))
    sections = [Section("Tune", tuple(blocks))]
    if tuning.checkpoint_plans:
        plans = [dataclasses.asdict(p) for p in tuning.checkpoint_plans]
        sections.append(Section(PLANS_TITLE, (plans_table(plans),)))
    sections.append(Section("Data loading", loading_blocks(tuning)))
    return Document(kind=DOCUMENT, data=tune_data(tuning), sections=tuple(sections))


PLANS_TITLE = "Checkpoint plans weighed"
PLAN_COLUMNS = (
    Column("modules", "recomputed", shrink=True),
    Column("kind", "how"),
    Column("peak_bytes", "peak", numeric=True),
    Column("activations_bytes", "kept", numeric=True, optional=True),
    Column("recompute_s", "recompute", numeric=True),
)
PLANS_CAPTION = (
    "every option the planner weighed for the checkpoint candidate: peak and activations"
    " kept from the step run on fake tensors, recompute time"
    " from the profile and checkpoint's own work timed here; whole: blocks or segments"
    " recomputed whole; ops: op by op, products, convolutions and attention kept;"
    " ops + products: op by op, with some kinds of product recomputed too (ops+K)"
)


def plans_table(plans: list[dict[str, Any]]) -> Table:
    """The planner's options (JSON objects of `PlannedCheckpoint`), the chosen in bold."""
    rows = tuple(plan_cells(p) for p in plans)
    chosen = [i for i, p in enumerate(plans) if p["chosen"]]
    ordered = rows if not chosen else (*rows[: chosen[0]], *rows[chosen[0] + 1 :], rows[chosen[0]])
    return Table(
        title="Every option, the one chosen last (in bold)",
        columns=PLAN_COLUMNS,
        rows=ordered,
        caption=PLANS_CAPTION,
        bold_rows=1 if chosen else 0,
    )


def plan_kind(modules: list[str] | tuple[str, ...]) -> str:
    """How a plan recomputes: nothing, whole, ops, or both; "ops + products" where some
    op-level modules recompute products too (`ops+K:`)."""
    if not modules:
        return "nothing"
    found = [_OP_LEVEL.match(m) for m in modules]
    ops = sum(1 for f in found if f)
    how = "ops" if ops == len(modules) else "whole" if not ops else "whole + ops"
    return how.replace("ops", "ops + products") if any(f and f[1] for f in found) else how


# `ops:NAME` or `ops+K:NAME`: a module recomputed op by op (K kinds of product too).
_OP_LEVEL = re.compile(r"ops(\+\d+)?:")


def plan_cells(plan: dict[str, Any]) -> tuple[Value | str, ...]:
    """One row of the plans' table, from its JSON object, in `PLAN_COLUMNS` order."""
    modules = list(plan["modules"])
    return (
        ", ".join(modules) or "(nothing: the plain step)",
        plan_kind(modules),
        Value(plan["peak_bytes"], Unit.BYTES),
        Value(plan["activations_bytes"], Unit.BYTES),
        Value(plan["recompute_s"], Unit.SECONDS),
    )


def _short_setting(label: str) -> str:
    """A DataLoader setting's label in a narrow terminal: "8 w pf2 pers; 1 thr"."""
    for long, short in (
        ("in the step's process", "0 w"),
        (" workers", " w"),
        (" worker", " w"),
        (", persistent", " pers"),
        (", pinned", " pin"),
        (", prefetch ", " pf"),
        (" threads", " thr"),
        (" thread", " thr"),
    ):
        label = label.replace(long, short)
    return label


LOADER_COLUMNS = (
    Column("setting", "DataLoader", shrink=True, abbreviate=_short_setting),
    Column("wait_s", "wait", numeric=True, min_width=7),
    Column("compute_s", "step", numeric=True, min_width=7),
    Column("predicted_loop_s", "pred. loop", numeric=True, min_width=7),
    Column("loop_s", "loop", numeric=True, min_width=7),
    Column("samples_per_s", "samples/s", numeric=True, optional=True),
    Column("first_batch_s", "first batch", numeric=True, optional=True),
    Column("outcome", "outcome"),
)
LOADER_TITLE = "DataLoader settings, each measured in the training loop"
LOADER_CAPTION = (
    "wait, step, loop: mean a step over the timed steps; pred. loop: max(step, wait without"
    " workers ÷ workers), which assumes workers on cores of their own"
)
NO_LOADER = (
    "not tuned: the workload has no data loader (Workload.loader); its step reuses one batch"
)


def loader_setting(label: str, threads: int) -> str:
    """A measured DataLoader setting: its options' `label` and the step's own CPU threads."""
    return f"{label}; {threads} thread{'s' if threads != 1 else ''}"


def loading_blocks(tuning: Tuning) -> tuple[Any, ...]:
    """The loader's settings as measured, the kept one, and the loop's diagnosis before
    and after; one line saying why when it was not tuned."""
    found = tuning.loading
    if found is None:
        why = tuning.loading_error or NO_LOADER
        return (Fields((("data loading", line(why)),)),)
    kept = found.kept
    removed = found.wait_removed
    summary = Fields(
        (
            (
                "kept",
                line(Value(f"{kept.options.label}; {_threads(kept.threads)}", style=Style.BOLD)),
            ),
            (
                "wait for data",
                line(
                    Value(found.runs[0].wait_s, Unit.SECONDS),
                    " a step → ",
                    Value(kept.wait_s, Unit.SECONDS),
                    " (",
                    Value(removed, Unit.FRACTION) if removed is not None else "—",
                    " removed)",
                ),
            ),
            (
                "diagnosis",
                line(
                    f"{found.bound_before} bound",
                    _findings(found.findings_before),
                    f" → {found.bound_after} bound",
                    _findings(found.findings_after),
                ),
            ),
            (
                "cores",
                line(
                    Value(found.cpu_cores, Unit.INTEGER),
                    " CPU cores shared by workers and the step",
                ),
            ),
        )
    )
    table = Table(
        title=LOADER_TITLE,
        columns=LOADER_COLUMNS,
        rows=tuple(
            (
                loader_setting(run.options.label, run.threads),
                Value(run.wait_s, Unit.SECONDS),
                Value(run.compute_s, Unit.SECONDS),
                Value(run.predicted_loop_s, Unit.SECONDS),
                Value(run.loop_s, Unit.SECONDS),
                Value(run.samples_per_s, Unit.NUMBER, ".0f"),
                Value(run.first_batch_s, Unit.SECONDS),
                Value("kept", style=Style.BOLD) if i == found.chosen else "",
            )
            for i, run in enumerate(found.runs)
        ),
        caption=LOADER_CAPTION,
        framed=True,
    )
    blocks: list[Any] = [summary, table]
    if found.note:
        blocks.append(Notes((found.note,), title="Note"))
    return tuple(blocks)


def _threads(count: int) -> str:
    return f"the step on {count} thread{'s' if count != 1 else ''}"


def _nothing_kept(tuning: Tuning) -> str:
    """Why the kept field is empty: no step candidate tried, or none won."""
    if not tuning.candidates:
        return "no candidate for the step was tried (--only)"
    return "nothing: no candidate was equivalent and faster (or fit the budget)"


def _findings(kinds: tuple[str, ...]) -> str:
    return f" ({', '.join(kinds)})" if kinds else ""


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
        "loading": _loading_data(tuning),
        "checkpoint_plans": [dataclasses.asdict(p) for p in tuning.checkpoint_plans],
    }


def _loading_data(tuning: Tuning) -> dict[str, Any] | None:
    found = tuning.loading
    if found is None:
        return {"error": tuning.loading_error} if tuning.loading_error else None
    return {
        "runs": [
            {
                **{k: v for k, v in dataclasses.asdict(run).items() if k != "options"},
                "options": run.options.kwargs(),
                "setting": run.options.label,
            }
            for run in found.runs
        ],
        "kept": found.chosen,
        "wait_removed": found.wait_removed,
        "bound_before": found.bound_before,
        "bound_after": found.bound_after,
        "findings_before": list(found.findings_before),
        "findings_after": list(found.findings_after),
        "cpu_cores": found.cpu_cores,
        "note": found.note,
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
        "verdict": c.verdict.value,
        "reason": c.reason,
        "suggestions": list(c.suggestions),
    }


_VERDICT_STYLES = {
    Verdict.KEPT: Style.BOLD,
    Verdict.FAILED_CHECK: Style.ERROR,
    Verdict.ERROR: Style.ERROR,
    Verdict.OVER_BUDGET: Style.WARNING,
}


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
        Value(c.verdict.value, style=_VERDICT_STYLES.get(c.verdict, Style.PLAIN)),
    )
