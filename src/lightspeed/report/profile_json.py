"""Saving a Profile as its JSON document (`report.profile_report`), and loading it back.

The document holds the facts (workload, hardware, timing, ops, memory) and, beside
them, what analysis derives (totals, phases, modules, each op's SoL and bound,
findings) so that other tools can read it without lightspeed. Loading keeps the facts
only: the derived part is recomputed from them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightspeed.analysis.profile_analysis import analyse
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import hardware_from_dict
from lightspeed.facts.profile import (
    CarriedOps,
    CarryValidation,
    FusionPrediction,
    OpTimeSource,
    Prediction,
    Profile,
    ScannedBackward,
)
from lightspeed.facts.records import MemoryBreakdown, MemoryOverStep, OpRecord, Phase
from lightspeed.facts.timing import Measurement, NoiseCheck, WorkloadInfo
from lightspeed.report import render_json
from lightspeed.report.profile_report import DOCUMENT, profile_document
from lightspeed.report.render_json import READABLE_PROFILE_VERSIONS, SCHEMA_VERSION


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write `profile`, with its analysis, as a JSON document at `path` (atomically)."""
    return render_json.write(Path(path), render_json.render(profile_document(analyse(profile))))


def load_profile(path: str | Path) -> Profile:
    """The Profile a JSON document written by `save_profile` (or `--json`) holds."""
    try:
        doc = json.loads(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; pass a profile written with --json.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not readable as JSON ({exc}).") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a profile is a JSON object, found {type(doc).__name__}.")
    return profile_from_doc(doc)


def profile_from_doc(doc: Mapping[str, Any]) -> Profile:
    """The Profile whose facts `doc` holds (as written by `profile_doc`)."""
    version = doc.get("schema_version")
    if doc.get("document") != DOCUMENT or version not in READABLE_PROFILE_VERSIONS:
        raise ConfigError(
            f"not a lightspeed profile of schema {SCHEMA_VERSION} or older (document"
            f" {doc.get('document')!r}, schema_version {doc.get('schema_version')!r})."
        )
    try:
        return _profile_facts(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"the profile document is damaged ({type(exc).__name__}: {exc})."
        ) from None


def _profile_facts(doc: Mapping[str, Any]) -> Profile:
    wl = doc["workload"]
    timing = doc["timing"]
    memory = doc["memory"]
    return Profile(
        workload=WorkloadInfo(
            name=wl["name"],
            batch_size=wl["batch_size"],
            device=Device(wl["device"]),
            precision=Precision(wl["dtype"]),
            parameter_count=wl["parameter_count"],
            tokens_per_sample=wl["tokens_per_sample"],
            parameter_tensors=wl.get("parameter_tensors"),
            target=wl.get("target"),
            jobs=wl.get("jobs", 1),
            # Written since autocast became --dtype bf16's meaning; before, bf16 was pure.
            mixed=wl.get("mixed", False),
        ),
        hardware=hardware_from_dict(doc["hardware"]),
        timing=None
        if timing is None
        else Measurement(
            times_s=tuple(timing["times_s"]),
            steps_per_replicate=timing["steps_per_replicate"],
            warmup_steps=timing["warmup_steps"],
            warmup_s=timing.get("warmup_s"),
            settled=timing.get("settled"),
            page_faults_per_call=timing.get("page_faults_per_call"),
            kernel_cpu_share=timing.get("kernel_cpu_share"),
            freed_memory_kept=timing.get("freed_memory_kept"),
            noise=None if timing.get("noise") is None else NoiseCheck(**timing["noise"]),
        ),
        ops=tuple(_op_record(o) for o in doc["ops"]),
        memory=None if memory is None else _memory_breakdown(memory),
        op_time_source=OpTimeSource(doc["op_time_source"]),
        profiled_step_s=doc["profiled_step_s"],
        unattributed_s=doc["unattributed_s"],
        failure=doc["failure"],
        torch_version=(doc.get("environment") or {}).get("torch_version"),
        cudnn_benchmark=(doc.get("environment") or {}).get("cudnn_benchmark"),
        prediction=None if doc.get("prediction") is None else _prediction(doc["prediction"]),
    )


_OP_FIELDS = tuple(f.name for f in dataclasses.fields(OpRecord))
_SHAPE_FIELDS = ("input_shapes", "output_shapes")
_TUPLE_FIELDS = ("input_dtypes", "output_dtypes")


def _op_record(o: Mapping[str, Any]) -> OpRecord:
    """The OpRecord facts of a JSON op (derived fields such as `sol_time_s` are dropped)."""
    # A field added since the document was written keeps its default.
    facts = {name: o[name] for name in _OP_FIELDS if name in o}
    facts["phase"] = Phase(facts["phase"])
    for name in _SHAPE_FIELDS:
        facts[name] = tuple(tuple(shape) for shape in facts[name])
    for name in _TUPLE_FIELDS:
        facts[name] = tuple(facts[name])
    return OpRecord(**facts)


def _prediction(p: Mapping[str, Any]) -> Prediction:
    return Prediction(
        changes=dict(p["changes"]),
        source_hardware=p["source_hardware"],
        measured_step_time_s=p["measured_step_time_s"],
        rules=tuple(p["rules"]),
        assumptions=tuple(p["assumptions"]),
        validated=p["validated"],
        largest_batch_size=p.get("largest_batch_size"),
        fusion=None if p.get("fusion") is None else FusionPrediction(**p["fusion"]),
        carried=tuple(_carried(c) for c in p.get("carried") or ()),
        scans=tuple(ScannedBackward(**scan) for scan in p.get("scans") or ()),
    )


def _carried(c: Mapping[str, Any]) -> CarriedOps:
    found = c.get("validation")
    return CarriedOps(
        **{k: v for k, v in c.items() if k != "validation"},
        validation=None if found is None else CarryValidation(**found),
    )


def _memory_breakdown(m: Mapping[str, Any]) -> MemoryBreakdown:
    over = m.get("over_step")
    return MemoryBreakdown(
        **{k: v for k, v in m.items() if k != "over_step"},
        over_step=None
        if over is None
        else MemoryOverStep(
            op_index=tuple(over["op_index"]),
            bytes={name: tuple(sizes) for name, sizes in over["bytes"].items()},
            phases=tuple((str(p), int(a), int(b)) for p, a, b in over["phases"]),
        ),
    )
