"""JSON documents lightspeed writes: each carries `schema_version` and what it is (`document`)."""

from __future__ import annotations

from typing import Any

from lightspeed.analysis.roofline import RooflinePoint, roofline_to_dict
from lightspeed.facts.hardware import Hardware, hardware_to_dict
from lightspeed.facts.timing import Measurement, StepTiming, WorkloadInfo
from lightspeed.report.documents import document


def hardware_doc(hw: Hardware) -> dict[str, Any]:
    return document("hardware", hardware_to_dict(hw))


def roofline_doc(point: RooflinePoint, hardware: Hardware | None) -> dict[str, Any]:
    body: dict[str, Any] = dict(roofline_to_dict(point))
    body["hardware"] = None if hardware is None else hardware.id
    return document("roofline", body)


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    return {
        "median_s": m.median_s,
        "iqr_s": m.iqr_s,
        "min_s": m.min_s,
        "max_s": m.max_s,
        "mean_s": m.mean_s,
        "replicates": m.n,
        "steps_per_replicate": m.steps_per_replicate,
        "warmup_steps": m.warmup_steps,
        "times_s": list(m.times_s),
        "warnings": list(m.warnings),
    }


def workload_to_dict(wl: WorkloadInfo) -> dict[str, Any]:
    """What was run, as the `workload` object of timing and profile documents."""
    return {
        "name": wl.name,
        "batch_size": wl.batch_size,
        "dtype": wl.precision.value,
        "device": wl.device.value,
        "parameter_count": wl.parameter_count,
        "tokens_per_sample": wl.tokens_per_sample,
    }


def timing_to_dict(timing: StepTiming) -> dict[str, Any]:
    """A step's timing with its throughput: total samples (tokens) over total seconds."""
    return {
        **measurement_to_dict(timing.measurement),
        "samples_per_s": timing.samples_per_s,
        "tokens_per_s": timing.tokens_per_s,
    }


def timing_doc(timing: StepTiming, hardware: Hardware | None) -> dict[str, Any]:
    return document(
        "timing",
        {
            "workload": workload_to_dict(timing.workload),
            "hardware": None if hardware is None else hardware_to_dict(hardware),
            "timing": timing_to_dict(timing),
        },
    )
