"""The report of a bench run as a Document: one row per workload (step time over its
rounds, throughput, fraction of the speed of light, MFU, peak memory, bound) and the
hardware; its data is the bench JSON document, each result carrying the `workload`,
`timing`, `totals` and `memory` objects a profile's JSON has."""

from __future__ import annotations

from typing import Any

from lightspeed.analysis.profile_analysis import ProfileAnalysis, analyse
from lightspeed.document import Column, Document, Notes, Span, Style, Table, Unit, Value
from lightspeed.facts.bench import MIN_ROUNDS, BenchResult, BenchRun
from lightspeed.facts.hardware import hardware_to_dict
from lightspeed.facts.timing import StepTiming
from lightspeed.report.hardware_report import hardware_summary
from lightspeed.report.profile_report import profile_data
from lightspeed.report.timing_report import measurement_data, workload_data

DOCUMENT = "bench"

COLUMNS = (
    Column("workload", "workload", shrink=True),
    Column("step_s", "step", numeric=True),
    Column("iqr_s", "± IQR", numeric=True, optional=True),
    Column("round_spread", "rounds", numeric=True, optional=True),
    Column("samples_per_s", "samples/s", numeric=True),
    Column("tokens_per_s", "tokens/s", numeric=True, optional=True),
    Column("efficiency", "of SoL", numeric=True),
    Column("mfu", "MFU", numeric=True, optional=True),
    Column("peak_bytes", "peak memory", numeric=True, optional=True),
    Column("bound", "bound"),
)


def bench_document(run: BenchRun) -> Document:
    """A row per workload, failures with their reason, then the hardware."""
    analyses = [_analysis(r) for r in run.results]
    rows = tuple(_row(r, a) for r, a in zip(run.results, analyses, strict=True))
    table = Table(
        title="Bench",
        columns=COLUMNS,
        rows=rows,
        caption=f"{len(run.results)} workloads ({run.size}), {run.rounds} rounds each. step:"
        " the median of the rounds' medians; rounds: slowest minus fastest round over the"
        " step",
    )
    sections: list[Any] = [table]
    failed = [f"{r.workload.name}: {r.failure}" for r in run.results if r.failure]
    if failed:
        sections.append(Notes(tuple(failed), title="Failed", style=Style.ERROR))
    sections.append(hardware_summary(run.hardware))
    warnings = tuple(w for r in run.results for w in _result_warnings(r))
    if run.rounds < MIN_ROUNDS:
        warnings = (
            f"{run.rounds} round{'s' * (run.rounds > 1)}: fewer than {MIN_ROUNDS} measure"
            " no reliable noise between rounds, so a comparison with this run judges by"
            " its threshold alone; run --rounds 3 or more",
            *warnings,
        )
    return Document(
        kind=DOCUMENT,
        data=bench_data(run, analyses),
        sections=tuple(sections),
        warnings=warnings,
    )


def _result_warnings(result: BenchResult) -> list[str]:
    """Its first round's warnings, then one line for its rounds' noise checks (every
    round's, not the first's alone) and one for its retries."""
    name = result.workload.name
    first = result.rounds[:1]
    of_noise = {w for m in first if m.noise is not None for w in m.noise.warnings}
    found = [f"{name}: {w}" for m in first for w in m.warnings if w not in of_noise]
    if result.retries:
        found.append(
            f"{name}: its noisy rounds were timed again {result.retries} time"
            f"{'s' * (result.retries > 1)}, keeping the quieter timing of each round:"
            f" {'still noisy' if result.noise_warnings else 'now quiet'}"
        )
    if result.noise_warnings:
        found.append(
            f"{name}: noise check failed ({'; '.join(result.noise_warnings)}): `lightspeed"
            " compare` will not judge its changes against this run; bench again when the"
            " machine is quiet, or with --retry-noisy N"
        )
    return found


def bench_data(
    run: BenchRun, analyses: list[ProfileAnalysis | None] | None = None
) -> dict[str, Any]:
    """The JSON body of a bench run (`analyses`, one per result, when already made)."""
    if analyses is None:
        analyses = [_analysis(r) for r in run.results]
    return {
        "size": run.size,
        "rounds": run.rounds,
        "threads": run.threads,
        "environment": {"torch_version": run.torch_version, "git_commit": run.git_commit},
        "hardware": hardware_to_dict(run.hardware),
        "results": [_result_data(r, a) for r, a in zip(run.results, analyses, strict=True)],
    }


def _analysis(result: BenchResult) -> ProfileAnalysis | None:
    profile = result.profile
    if profile is None or profile.timing is None or result.failure is not None:
        return None
    return analyse(profile)


def _result_data(result: BenchResult, analysis: ProfileAnalysis | None) -> dict[str, Any]:
    profile = None if analysis is None else profile_data(analysis)
    step = _round_timing(result)
    return {
        "workload": workload_data(result.workload),
        "timing": None
        if step is None
        else {
            **measurement_data(step.measurement),
            "samples_per_s": step.samples_per_s,
            "tokens_per_s": step.tokens_per_s,
        },
        "totals": None if profile is None else profile["totals"],
        "memory": None if profile is None else profile["memory"],
        "bound": None if profile is None else profile["bound"],
        "phases": None if profile is None else profile["phases"],
        "findings": None if profile is None else profile["findings"],
        "rounds": [measurement_data(m) for m in result.rounds],
        "round_medians_s": list(result.round_medians_s),
        "step_s": result.step_s,
        "round_spread": result.round_spread,
        # What the rounds' noise checks said: a comparison does not judge a
        # change where either run's checks failed.
        "noise_warnings": list(result.noise_warnings),
        "retries": result.retries,
        "failure": result.failure,
    }


def _round_timing(result: BenchResult) -> StepTiming | None:
    """The round whose median is the bench's step time (the middle one), as a timing."""
    if not result.rounds:
        return None
    ordered = sorted(result.rounds, key=lambda m: m.median_s)
    middle = ordered[(len(ordered) - 1) // 2]
    return StepTiming(workload=result.workload, measurement=middle)


def _row(result: BenchResult, analysis: ProfileAnalysis | None) -> tuple[Span, ...]:
    name = result.workload.name
    if result.failure is not None:
        failed = Value("failed", style=Style.ERROR)
        return (name, failed, "", "", "", "", "", "", "", "")
    step = _round_timing(result)
    assert step is not None and analysis is not None
    totals = analysis.totals
    memory = result.profile.memory if result.profile is not None else None
    return (
        name,
        Value(result.step_s, Unit.SECONDS),
        Value(step.measurement.iqr_s, Unit.SECONDS),
        Value(result.round_spread, Unit.FRACTION),
        Value(step.samples_per_s, Unit.NUMBER, ",.1f"),
        Value(step.tokens_per_s, Unit.NUMBER, ",.0f") if step.tokens_per_s else "",
        Value(totals.efficiency, Unit.FRACTION),
        Value(totals.mfu, Unit.FRACTION),
        Value(None if memory is None else memory.peak_bytes, Unit.BYTES),
        analysis.bound.value,
    )
