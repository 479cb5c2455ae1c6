"""The report of a timed step, built once as a Document: step time with its spread,
throughput, warnings, and the hardware it ran on."""

from __future__ import annotations

import dataclasses
from typing import Any

from lightspeed.document import (
    Document,
    Fields,
    Line,
    Section,
    Style,
    Unit,
    Value,
    line,
)
from lightspeed.facts.hardware import Hardware, hardware_to_dict
from lightspeed.facts.timing import Measurement, StepTiming, WorkloadInfo
from lightspeed.report.hardware_report import hardware_summary

DOCUMENT = "timing"


def workload_data(wl: WorkloadInfo) -> dict[str, Any]:
    """What was run, as the `workload` object of timing and profile documents."""
    return {
        "name": wl.name,
        "batch_size": wl.batch_size,
        "dtype": wl.precision.value,
        "mixed": wl.mixed,
        "device": wl.device.value,
        "parameter_count": wl.parameter_count,
        "tokens_per_sample": wl.tokens_per_sample,
        "parameter_tensors": wl.parameter_tensors,
        "target": wl.target,
        "jobs": wl.jobs,
    }


def measurement_data(m: Measurement) -> dict[str, Any]:
    """Every replicate of a measurement, with its median, spread and warnings."""
    return {
        "median_s": m.median_s,
        "iqr_s": m.iqr_s,
        "min_s": m.min_s,
        "max_s": m.max_s,
        "mean_s": m.mean_s,
        "replicates": m.n,
        "steps_per_replicate": m.steps_per_replicate,
        "warmup_steps": m.warmup_steps,
        "warmup_s": m.warmup_s,
        "settled": m.settled,
        "page_faults_per_call": m.page_faults_per_call,
        "kernel_cpu_share": m.kernel_cpu_share,
        "freed_memory_kept": m.freed_memory_kept,
        "times_s": list(m.times_s),
        "noise": None if m.noise is None else dataclasses.asdict(m.noise),
        "warnings": list(m.warnings),
    }


def timing_data(wl: WorkloadInfo, m: Measurement) -> dict[str, Any]:
    """A step's timing with its throughput: total samples (tokens) over total seconds."""
    timing = StepTiming(workload=wl, measurement=m)
    return {
        **measurement_data(m),
        "samples_per_s": timing.samples_per_s,
        "tokens_per_s": timing.tokens_per_s,
    }


def workload_line(wl: WorkloadInfo) -> Line:
    """`name: batch B, bf16 autocast on device, N parameters` (`K jobs of batch B` when
    fused; `bf16 pure` for a step cast whole)."""
    batch = f"batch {wl.batch_size}" if wl.jobs == 1 else f"{wl.jobs} jobs of batch {wl.batch_size}"
    return line(
        f"{wl.name}: {batch}, {wl.dtype.label} on {wl.device.value}, ",
        Value(wl.parameter_count or 0, Unit.COUNT),
        " parameters",
    )


def warmup_detail(m: Measurement) -> tuple[str | Value, ...]:
    """` (1.2 s, settled)`: how long the warm-up took and whether the step time settled."""
    if m.warmup_s is None:
        return ()
    verdict = {True: ", settled", False: ", still drifting", None: ""}[m.settled]
    return (" (", Value(m.warmup_s, Unit.SECONDS), f"{verdict})")


def timing_document(timing: StepTiming, hardware: Hardware | None) -> Document:
    """Step time with its spread, throughput, and the hardware it ran on."""
    wl = timing.workload
    m = timing.measurement
    rows: list[tuple[str, Line]] = [
        ("workload", workload_line(wl)),
        (
            "step time",
            line(
                Value(m.median_s, Unit.SECONDS, suffix=" median", style=Style.BOLD),
                "  (IQR ",
                Value(m.iqr_s, Unit.SECONDS),
                ", min ",
                Value(m.min_s, Unit.SECONDS),
                ", max ",
                Value(m.max_s, Unit.SECONDS),
                ")",
            ),
        ),
        (
            "replicates",
            line(
                f"{m.n} × {m.steps_per_replicate} step"
                f"{'s' if m.steps_per_replicate > 1 else ''} after {m.warmup_steps} warm-up",
                *warmup_detail(m),
            ),
        ),
        ("throughput", line(Value(timing.samples_per_s, Unit.NUMBER, ",.1f", " samples/s"))),
    ]
    if timing.tokens_per_s is not None:
        rows.append(("", line(Value(timing.tokens_per_s, Unit.NUMBER, ",.0f", " tokens/s"))))
    sections: list[Section] = [Section("Step timing", (Fields(tuple(rows)),))]
    if hardware is not None:
        sections.append(hardware_summary(hardware))
    data = {
        "workload": workload_data(wl),
        "hardware": None if hardware is None else hardware_to_dict(hardware),
        "timing": timing_data(wl, m),
    }
    return Document(kind=DOCUMENT, data=data, sections=tuple(sections), warnings=m.warnings)
