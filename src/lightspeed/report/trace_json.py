"""A trace analysis as a versioned JSON document (`document: "trace-analysis"`).

Per rank: `temporal_breakdown`, `idle_breakdown`, `bound` and `findings` for the whole
trace, the same for each step under `steps`, and the detail beside them (streams,
kernels, launches, host, overlap, notes). Across ranks: each step compared (`skew`,
with its collectives matched across ranks), the collectives by kernel name, notes and
findings. Seconds throughout; ranks as string keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lightspeed.report.documents import document, finding_dict
from lightspeed.trace.analysis import RankAnalysis, TraceAnalysis, WindowAnalysis
from lightspeed.trace.collectives import CollectiveSkew


def trace_doc(analysis: TraceAnalysis) -> dict[str, Any]:
    """The JSON document of a trace analysis."""
    return document(
        "trace-analysis",
        {
            "ranks": [_rank(r) for r in analysis.ranks],
            "skew": [
                {
                    "step": s.step,
                    "step_s": _by_rank(s.step_s),
                    "communication_s": _by_rank(s.communication_s),
                    "communication_spread_s": s.communication_spread_s,
                    "collective_wait_s": _by_rank(s.collective_wait_s),
                    "last_arrivals": _by_rank(s.last_arrivals),
                    "collectives": [_collective(c) for c in s.collectives],
                }
                for s in analysis.skew
            ],
            "collectives": [_collective(c) for c in analysis.collectives],
            "notes": list(analysis.notes),
            "findings": [finding_dict(f) for f in analysis.findings],
        },
    )


def _by_rank(values: Mapping[int, float]) -> dict[str, float]:
    return {str(rank): v for rank, v in values.items()}


def _collective(c: CollectiveSkew) -> dict[str, Any]:
    return {
        **dataclasses.asdict(c),
        "mean_spread_s": c.mean_spread_s,
        "wait_s": _by_rank(c.wait_s),
        "last_arrivals": _by_rank(c.last_arrivals),
    }


def _rank(r: RankAnalysis) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "path": r.path,
        "devices": list(r.devices),
        **_window(r.whole),
        "steps": [_window(w) for w in r.steps],
        "notes": list(r.notes),
    }


def _window(w: WindowAnalysis) -> dict[str, Any]:
    return {
        "step": w.step,
        "step_s": w.step_s,
        "temporal_breakdown": dataclasses.asdict(w.temporal),
        "idle_breakdown": dataclasses.asdict(w.idle),
        "bound": w.bound.value,
        "findings": [finding_dict(f) for f in w.findings],
        "communication": {
            "communication_s": w.overlap.communication_s,
            "overlapped_s": w.overlap.overlapped_s,
            "overlap_fraction": w.overlap.fraction,
            "exposed_s": w.overlap.exposed_s,
        },
        "launches": {
            **dataclasses.asdict(w.launches),
            "cpu_per_launch_s": w.launches.cpu_per_launch_s,
        },
        "host": {**dataclasses.asdict(w.host), "overhead_s": w.host.overhead_s},
        "matmuls": None
        if w.matmuls is None
        else {
            **dataclasses.asdict(w.matmuls),
            "flops_per_s": w.matmuls.flops_per_s,
            "fraction_of_sol": w.matmuls.fraction_of_sol,
        },
        "device_syncs": dict(w.device_syncs),
        "kernel_types": {t.value: s for t, s in w.kernel_types.items()},
        "kernels": [{**dataclasses.asdict(k), "type": k.type.value} for k in w.kernels],
        "streams": [
            {"device": s.device, "stream": s.stream, **dataclasses.asdict(s.idle)}
            for s in w.streams
        ],
    }
