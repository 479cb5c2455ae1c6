"""JSON documents lightspeed writes: each carries `schema_version` and what it is (`document`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightspeed.analysis.finding import Finding
from lightspeed.analysis.roofline import RooflinePoint, roofline_to_dict
from lightspeed.hardware.model import Hardware, hardware_to_dict
from lightspeed.measure.timer import Measurement

if TYPE_CHECKING:  # measure.timing imports torch; these are annotations only
    from lightspeed.measure.timing import StepTiming, WorkloadInfo

SCHEMA_VERSION = 1


def document(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` stamped with the schema version and what the document is."""
    return {"schema_version": SCHEMA_VERSION, "document": kind, **body}


def dumps(doc: dict[str, Any]) -> str:
    """Strict JSON text: non-finite floats (an infinite intensity) become null."""
    return json.dumps(_finite(doc), indent=2, allow_nan=False)


def write(path: Path, doc: dict[str, Any]) -> Path:
    """Write `doc` to `path` atomically (a failure never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(doc) + "\n", "utf-8")
    tmp.replace(path)
    return path


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding's JSON object: kind, message, evidence."""
    return {"kind": f.kind, "message": f.message, "evidence": dict(f.evidence)}


def hardware_doc(hw: Hardware) -> dict[str, Any]:
    return document("hardware", hardware_to_dict(hw))


def roofline_doc(point: RooflinePoint, hardware: Hardware | None) -> dict[str, Any]:
    body: dict[str, Any] = dict(roofline_to_dict(point))
    body["hardware"] = None if hardware is None else hardware.id
    return document("roofline", body)


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    return {
        "step_time_s": m.median_s,
        "iqr_s": m.iqr_s,
        "min_s": m.min_s,
        "max_s": m.max_s,
        "mean_s": m.mean_s,
        "n": m.n,
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


def timing_to_dict(m: Measurement, wl: WorkloadInfo) -> dict[str, Any]:
    """A step's timing with its throughput: total samples (tokens) over total seconds."""
    measured = measurement_to_dict(m)
    measured["samples_per_s"] = m.per_second(wl.batch_size)
    tokens = wl.tokens_per_sample
    measured["tokens_per_s"] = None if tokens is None else m.per_second(wl.batch_size * tokens)
    return measured


def timing_doc(timing: StepTiming, hardware: Hardware | None) -> dict[str, Any]:
    return document(
        "timing",
        {
            "workload": workload_to_dict(timing.workload),
            "hardware": None if hardware is None else hardware_to_dict(hardware),
            "timing": timing_to_dict(timing.measurement, timing.workload),
        },
    )
