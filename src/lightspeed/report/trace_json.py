"""A trace analysis as a versioned JSON document (`document: "trace-analysis"`).

Per rank: `temporal_breakdown`, `idle_breakdown`, `bound` and `findings` for the whole
trace, the same for each step under `steps`, and the detail beside them (streams,
kernels, launches, host, overlap, notes). Seconds throughout.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lightspeed.analysis.trace_summary import RankAnalysis, TraceAnalysis, WindowAnalysis
from lightspeed.report.json_report import document, finding_dict


def trace_doc(analysis: TraceAnalysis) -> dict[str, Any]:
    """The JSON document of a trace analysis."""
    return document(
        "trace-analysis",
        {
            "ranks": [_rank(r) for r in analysis.ranks],
            "skew": [
                {
                    "step": s.step,
                    "step_s": {str(k): v for k, v in s.step_s.items()},
                    "communication_s": {str(k): v for k, v in s.communication_s.items()},
                    "communication_spread_s": s.communication_spread_s,
                }
                for s in analysis.skew
            ],
            "findings": [finding_dict(f) for f in analysis.findings],
        },
    )


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
        "device_syncs": dict(w.device_syncs),
        "kernel_types": {t.value: s for t, s in w.kernel_types.items()},
        "kernels": [{**dataclasses.asdict(k), "type": k.type.value} for k in w.kernels],
        "streams": [
            {"device": s.device, "stream": s.stream, **dataclasses.asdict(s.idle)}
            for s in w.streams
        ],
    }
