"""A Profile as a versioned JSON document, and back.

The document holds the facts (workload, hardware, timing, ops, memory) and, beside
them, what analysis derives (totals, phases, modules, each op's SoL and bound,
findings) so that other tools can read it without lightspeed. Loading keeps the facts
only: the derived part is recomputed from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.analysis.step_roofline import Aggregate, OpAnalysis
from lightspeed.analysis.summary import ProfileAnalysis
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.hardware.model import hardware_from_dict, hardware_to_dict
from lightspeed.measure.device import Device
from lightspeed.measure.profile_facts import OpTimeSource, Profile
from lightspeed.measure.records import MemoryBreakdown, OpRecord, Phase
from lightspeed.measure.timer import Measurement
from lightspeed.measure.timing import WorkloadInfo
from lightspeed.report.json_report import SCHEMA_VERSION, document, measurement_to_dict


def profile_doc(analysis: ProfileAnalysis) -> dict[str, Any]:
    """The JSON document of a profile with its analysis."""
    profile = analysis.profile
    totals = analysis.totals
    wl = profile.workload
    timing = None
    if profile.timing is not None:
        timing = measurement_to_dict(profile.timing)
        timing["samples_per_s"] = profile.timing.per_second(wl.batch_size)
        tokens = wl.tokens_per_sample
        timing["tokens_per_s"] = None if tokens is None else timing["samples_per_s"] * tokens
    return document(
        "profile",
        {
            "workload": {
                "name": wl.name,
                "batch_size": wl.batch_size,
                "dtype": wl.precision.value,
                "device": wl.device.value,
                "parameter_count": wl.parameter_count,
                "tokens_per_sample": wl.tokens_per_sample,
            },
            "hardware": hardware_to_dict(profile.hardware),
            "timing": timing,
            "totals": {
                "flops": totals.flops,
                "model_flops": totals.model_flops,
                "bytes": totals.bytes,
                "sol_time_s": totals.sol_time_s,
                "step_time_s": totals.step_time_s,
                "efficiency": totals.efficiency,
                "achieved_flops_per_s": totals.achieved_flops_per_s,
                "peak_flops_per_s": totals.peak_flops_per_s,
                "mfu": totals.mfu,
                "hfu": totals.hfu,
            },
            "phases": {p.value: _aggregate(agg) for p, agg in analysis.phases.items()},
            "modules": {path: _aggregate(agg) for path, agg in analysis.modules.items()},
            "op_time_source": profile.op_time_source.value,
            "profiled_step_s": profile.profiled_step_s,
            "unattributed_s": profile.unattributed_s,
            "ops": [_op(a) for a in analysis.ops],
            "memory": None if profile.memory is None else _memory(profile.memory),
            "findings": [
                {"kind": f.kind, "message": f.message, "evidence": dict(f.evidence)}
                for f in analysis.findings
            ],
            "failure": profile.failure,
        },
    )


def _aggregate(agg: Aggregate) -> dict[str, Any]:
    return {
        "flops": agg.flops,
        "bytes": agg.bytes,
        "time_s": agg.time_s,
        "sol_time_s": agg.sol_time_s,
        "op_count": agg.op_count,
    }


def _op(a: OpAnalysis) -> dict[str, Any]:
    op = a.op
    return {
        "index": op.index,
        "name": op.name,
        "module": op.module,
        "phase": op.phase.value,
        "flops": op.flops,
        "macs": op.macs,
        "flops_known": op.flops_known,
        "bytes": op.bytes,
        "bytes_read": op.bytes_read,
        "bytes_written": op.bytes_written,
        "input_shapes": [list(s) for s in op.input_shapes],
        "input_dtypes": list(op.input_dtypes),
        "output_shapes": [list(s) for s in op.output_shapes],
        "output_dtypes": list(op.output_dtypes),
        "causal": op.causal,
        "time_s": op.time_s,
        "precision": a.precision.value,
        "sol_time_s": a.sol_time_s,
        "efficiency": a.efficiency,
        "bound": None if a.bound is None else a.bound.value,
    }


def _memory(m: MemoryBreakdown) -> dict[str, Any]:
    return {
        "parameters_bytes": m.parameters_bytes,
        "gradients_bytes": m.gradients_bytes,
        "optimizer_state_bytes": m.optimizer_state_bytes,
        "activations_bytes": m.activations_bytes,
        "temporaries_bytes": m.temporaries_bytes,
        "inputs_bytes": m.inputs_bytes,
        "peak_bytes": m.peak_bytes,
        "at_peak_bytes": dict(m.at_peak_bytes),
        "method": m.method,
    }


def profile_from_doc(doc: Mapping[str, Any]) -> Profile:
    """The Profile whose facts `doc` holds (as written by `profile_doc`)."""
    if doc.get("document") != "profile" or doc.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(
            f"not a lightspeed profile of schema {SCHEMA_VERSION} (document"
            f" {doc.get('document')!r}, schema_version {doc.get('schema_version')!r})."
        )
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
        ),
        hardware=hardware_from_dict(doc["hardware"]),
        timing=None
        if timing is None
        else Measurement(
            times_s=tuple(timing["times_s"]),
            steps_per_replicate=timing["steps_per_replicate"],
            warmup_steps=timing["warmup_steps"],
        ),
        ops=tuple(_op_record(o) for o in doc["ops"]),
        memory=None if memory is None else _memory_breakdown(memory),
        op_time_source=OpTimeSource(doc["op_time_source"]),
        profiled_step_s=doc["profiled_step_s"],
        unattributed_s=doc["unattributed_s"],
        failure=doc["failure"],
    )


def _op_record(o: Mapping[str, Any]) -> OpRecord:
    return OpRecord(
        index=o["index"],
        name=o["name"],
        module=o["module"],
        phase=Phase(o["phase"]),
        input_shapes=tuple(tuple(s) for s in o["input_shapes"]),
        input_dtypes=tuple(o["input_dtypes"]),
        output_shapes=tuple(tuple(s) for s in o["output_shapes"]),
        output_dtypes=tuple(o["output_dtypes"]),
        flops=o["flops"],
        macs=o["macs"],
        bytes_read=o["bytes_read"],
        bytes_written=o["bytes_written"],
        flops_known=o["flops_known"],
        causal=o["causal"],
        time_s=o["time_s"],
    )


def _memory_breakdown(m: Mapping[str, Any]) -> MemoryBreakdown:
    return MemoryBreakdown(
        parameters_bytes=m["parameters_bytes"],
        gradients_bytes=m["gradients_bytes"],
        optimizer_state_bytes=m["optimizer_state_bytes"],
        activations_bytes=m["activations_bytes"],
        temporaries_bytes=m["temporaries_bytes"],
        inputs_bytes=m["inputs_bytes"],
        peak_bytes=m["peak_bytes"],
        at_peak_bytes=dict(m["at_peak_bytes"]),
        method=m["method"],
    )
