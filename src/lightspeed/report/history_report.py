"""Reports of the results store: the runs it holds, one workload across runs, and two
runs compared (`analysis.bench_compare`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from lightspeed.analysis.bench_compare import Change, Comparison, Verdict
from lightspeed.document import Column, Document, Span, Style, Table, Unit, Value

_VERDICT_STYLE = {
    Verdict.REGRESSION: Style.ERROR,
    Verdict.IMPROVEMENT: Style.BOLD,
    Verdict.UNCHANGED: Style.PLAIN,
    Verdict.MISSING: Style.WARNING,
    Verdict.NOT_JUDGED: Style.WARNING,
}


# git's own short form of a commit: enough to tell the runs of one repository apart.
SHORT_COMMIT = 7


def _commit(commit: str | None) -> str:
    """A run's commit as git abbreviates it, "+" where the tree had uncommitted changes."""
    return "" if not commit else commit[:SHORT_COMMIT] + ("+" if commit.endswith("+") else "")


def _when(created_at: str | None) -> str:
    """An ISO time as "YYYY-MM-DD HH:MM" (the store's times are UTC): the seconds and
    the zone would crowd the commit out of a terminal 80 columns wide."""
    return "" if not created_at else created_at[:16].replace("T", " ")


def runs_document(runs: Sequence[dict[str, Any]], store: str) -> Document:
    """Every run of the store, oldest first."""
    table = Table(
        title="Runs",
        columns=(
            Column("id", "run", numeric=True),
            Column("created_at", "when"),
            Column("git_commit", "commit"),
            Column("machine", "machine", shrink=True),
            Column("threads", "threads", numeric=True),
            Column("size", "size"),
            Column("workloads", "workloads", numeric=True),
        ),
        rows=tuple(
            (
                Value(r["id"], Unit.INTEGER),
                _when(r["created_at"]),
                _commit(r["git_commit"]),
                r["machine"] or "",
                Value(r["threads"], Unit.INTEGER),
                r["size"] or "",
                Value(r["workloads"], Unit.INTEGER),
            )
            for r in runs
        ),
        caption=f"in {store}; times in UTC"
        if runs
        else f"none yet in {store}: `lightspeed bench` adds one",
    )
    return Document(kind="history", data={"store": store, "runs": list(runs)}, sections=(table,))


def workload_history_document(
    workload: str, rows: Sequence[dict[str, Any]], store: str
) -> Document:
    """One workload's step time and figures across the runs that benched it."""
    table = Table(
        title=f"History: {workload}",
        columns=(
            Column("id", "run", numeric=True),
            Column("created_at", "when"),
            Column("git_commit", "commit"),
            Column("step_s", "step", numeric=True),
            Column("round_spread", "rounds", numeric=True),
            Column("samples_per_s", "samples/s", numeric=True),
            Column("efficiency", "of SoL", numeric=True),
            Column("peak_bytes", "peak memory", numeric=True, optional=True),
        ),
        rows=tuple(_history_row(r) for r in rows),
        caption=f"in {store}; times in UTC",
    )
    data = {"store": store, "workload": workload, "results": list(rows)}
    return Document(kind="history", data=data, sections=(table,))


def _history_row(r: dict[str, Any]) -> tuple[Span, ...]:
    if r["failure"]:
        failed = Value("failed", style=Style.ERROR)
        return (
            Value(r["id"], Unit.INTEGER),
            _when(r["created_at"]),
            _commit(r["git_commit"]),
            failed,
            "",
            "",
            "",
            "",
        )
    return (
        Value(r["id"], Unit.INTEGER),
        _when(r["created_at"]),
        _commit(r["git_commit"]),
        Value(r["step_s"], Unit.SECONDS),
        Value(r["round_spread"], Unit.FRACTION),
        Value(r["samples_per_s"], Unit.NUMBER, ",.1f"),
        Value(r["efficiency"], Unit.FRACTION),
        Value(r["peak_bytes"], Unit.BYTES),
    )


def compare_document(comparison: Comparison, a_label: str, b_label: str) -> Document:
    """Each workload's step in both runs, the change, the noise it is judged against and
    the verdict; the runs' incomparabilities as warnings."""
    table = Table(
        title=f"Compare: {b_label} against {a_label}",
        columns=(
            Column("workload", "workload", shrink=True),
            Column("a_step_s", "before", numeric=True),
            Column("b_step_s", "after", numeric=True),
            Column("change", "change", numeric=True),
            Column("noise", "noise", numeric=True, optional=True),
            Column("verdict", "verdict"),
        ),
        rows=tuple(
            (
                c.workload,
                Value(c.a_step_s, Unit.SECONDS),
                Value(c.b_step_s, Unit.SECONDS),
                Value(None if c.ratio is None else c.ratio - 1, Unit.NUMBER, "+.1%"),
                Value(c.noise, Unit.FRACTION),
                Value(c.verdict.value, style=_VERDICT_STYLE[c.verdict]),
            )
            for c in comparison.changes
        ),
        caption=f"a change counts when it exceeds both {comparison.threshold:.0%} and the"
        " noise between rounds (the larger round spread of the two runs), and neither run's"
        " noise check failed (else: not judged)",
    )
    data = {
        "a": a_label,
        "b": b_label,
        "threshold": comparison.threshold,
        "changes": [
            {**dataclasses.asdict(c), "verdict": c.verdict.value} for c in comparison.changes
        ],
        "regressions": [c.workload for c in comparison.regressions],
        "not_judged": [c.workload for c in comparison.not_judged],
        "fails": comparison.fails,
    }
    unjudged = tuple(_not_judged_line(c, a_label, b_label) for c in comparison.not_judged)
    return Document(
        kind="compare",
        data=data,
        sections=(table,),
        warnings=(*comparison.warnings, *unjudged),
    )


def _not_judged_line(change: Change, a_label: str, b_label: str) -> str:
    """`workload: not judged: run 2 was noisy (what its noise checks said)`."""
    noisy = [
        (label, said)
        for label, said in ((a_label, change.a_noise), (b_label, change.b_noise))
        if said
    ]
    if len(noisy) == 1:
        ((label, said),) = noisy
        why = f"{label} was noisy ({'; '.join(said)})"
    else:
        told = "; ".join(f"{label}: {'; '.join(said)}" for label, said in noisy)
        why = f"{a_label} and {b_label} were noisy ({told})"
    return f"{change.workload}: not judged: {why}"
