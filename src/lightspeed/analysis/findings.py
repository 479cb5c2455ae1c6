"""Findings: what a profile says to look at, each with the numbers behind it."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from lightspeed.analysis.bottleneck_rules import HOST_OVERHEAD_SHARE, StepBound, max_speedup
from lightspeed.analysis.finding import Finding
from lightspeed.analysis.roofline import Bound
from lightspeed.analysis.step_roofline import OpAnalysis, StepTotals
from lightspeed.dtypes import TENSOR_CORE_MULTIPLE, Precision
from lightspeed.facts.hardware import DeviceKind, Hardware
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import OpRecord

# Fraction of the step above which overhead-bound ops or unattributed time are reported.
REPORT_FRACTION = 0.2
# An op measured this much faster than its speed of light is beyond timing noise: the
# ceilings it is compared with are too low. On a shared 2-core guest, the in-cache
# bandwidth of one kernel varied by up to 23 % between calibrations a minute apart
# (docs/benchmarks.md), so smaller excesses are noise.
ABOVE_SOL_TOLERANCE = 0.25


def matmul_dims(op: OpRecord) -> dict[str, int] | None:
    """The M, K, N (or channel) dimensions of a forward matmul or convolution, if it is one."""
    shapes = op.input_shapes
    name = op.name.removeprefix("aten::")
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = shapes[-2], shapes[-1]
        if len(a) < 2 or len(b) < 2:
            return None
        return {"M": a[-2], "K": a[-1], "N": b[-1]}
    if name in ("convolution", "_convolution", "mkldnn_convolution", "cudnn_convolution"):
        x, w = shapes[0], shapes[1]
        if len(x) < 3 or len(w) < 3:
            return None
        return {"C_in": x[1], "C_out": w[0]}
    return None


def tensor_core_findings(
    analyses: Sequence[OpAnalysis], hardware: Hardware, step_precision: Precision
) -> list[Finding]:
    """Matmul and conv ops whose dimensions keep them off a GPU's tensor cores."""
    if hardware.kind is not DeviceKind.GPU:
        return []
    precision = step_precision
    if precision is Precision.FP32 and Precision.TF32 in hardware.peak_flops_per_s:
        precision = Precision.TF32
    multiple = TENSOR_CORE_MULTIPLE.get(precision)
    if multiple is None:
        return []
    found: dict[tuple[str, str, tuple[tuple[int, ...], ...]], Finding] = {}
    for a in analyses:
        dims = matmul_dims(a.op)
        if dims is None:
            continue
        bad = {k: v for k, v in dims.items() if v % multiple}
        key = (a.op.module, a.op.name, a.op.input_shapes)
        if not bad or key in found:
            continue
        padded = {k: math.ceil(v / multiple) * multiple for k, v in dims.items()}
        shape = "×".join(f"{k}={v}" for k, v in dims.items())
        fixed = "×".join(f"{k}={v}" for k, v in padded.items())
        found[key] = Finding(
            kind="tensor-core-ineligible",
            message=(
                f"{a.op.name} in {a.op.module or 'the model root'} has {shape}; {precision.value}"
                f" tensor cores need multiples of {multiple}: pad to {fixed}"
            ),
            evidence={
                "module": a.op.module,
                "op": a.op.name,
                "shape": shape,
                "padded_shape": fixed,
                "multiple": multiple,
                "time_s": a.time_s if a.time_s is not None else float("nan"),
            },
        )
    return list(found.values())


def step_findings(
    profile: Profile,
    analyses: Sequence[OpAnalysis],
    totals: StepTotals,
    by_bound: Mapping[Bound | None, float],
) -> list[Finding]:
    """Findings about the whole step: overhead-bound ops, unattributed time, low efficiency."""
    findings: list[Finding] = []
    step = totals.step_time_s
    if not step:
        return findings
    overhead = [a for a in analyses if a.bound is Bound.OVERHEAD]
    overhead_s = by_bound[Bound.OVERHEAD]
    measured_s = sum(by_bound.values())
    profiled_s = profile.profiled_step_s or measured_s
    if measured_s and overhead_s / measured_s > REPORT_FRACTION:
        findings.append(
            Finding(
                kind="overhead-bound-ops",
                message=(
                    f"{len(overhead)} ops spend {100 * overhead_s / measured_s:.0f}% of op time on"
                    " fixed per-op cost: a larger batch, fused ops or torch.compile cut it"
                ),
                evidence={
                    "ops": len(overhead),
                    "time_s": overhead_s,
                    "op_time_s": measured_s,
                    "max_speedup": max_speedup(overhead_s / profiled_s),
                },
            )
        )
    if profile.unattributed_s and profile.profiled_step_s:
        fraction = profile.unattributed_s / profile.profiled_step_s
        if fraction > REPORT_FRACTION:
            findings.append(
                Finding(
                    kind="unattributed-time",
                    message=(
                        f"{100 * fraction:.0f}% of the profiled step ran outside any captured op"
                        " (Python, autograd engine, framework overhead)"
                    ),
                    evidence={
                        "unattributed_s": profile.unattributed_s,
                        "profiled_step_s": profile.profiled_step_s,
                        "max_speedup": max_speedup(fraction),
                    },
                )
            )
    findings += above_speed_of_light(profile.hardware, analyses, totals)
    if totals.efficiency is not None and totals.efficiency <= 1:
        findings.append(
            Finding(
                kind="speed-of-light",
                message=(
                    f"the step runs at {100 * totals.efficiency:.1f}% of the speed of light on"
                    f" {profile.hardware.name}: at most {1 / max(totals.efficiency, 1e-12):.1f}×"
                    " faster with perfect kernels and no overhead"
                ),
                evidence={
                    "sol_time_s": totals.sol_time_s,
                    "step_time_s": step,
                    "max_speedup": 1 / max(totals.efficiency, 1e-12),
                },
            )
        )
    return findings


def above_speed_of_light(
    hardware: Hardware, analyses: Sequence[OpAnalysis], totals: StepTotals
) -> list[Finding]:
    """Ops (or the step) measured faster than their speed of light allows.

    No real run beats the speed of light of the hardware it ran on, so this says the
    ceilings are wrong for the run: calibrated while the machine was busy, or another
    device's than the one the step ran on.
    """
    limit = 1 + ABOVE_SOL_TOLERANCE
    above = [a for a in analyses if (a.efficiency or 0.0) > limit]
    step_above = (totals.efficiency or 0.0) > 1
    if not above and not step_above:
        return []
    fastest = max([a.efficiency or 0.0 for a in above] + [totals.efficiency or 0.0])
    fix = (
        "calibrate again with `lightspeed hw calibrate` on a quiet machine"
        if hardware.calibration is not None
        else "check that --hardware names the device the step ran on"
    )
    return [
        Finding(
            kind="above-speed-of-light",
            message=(
                f"{len(above)} ops{' and the step' if step_above else ''} ran faster than"
                f" the speed of light of {hardware.name} (up to {100 * fastest:.0f}%): its"
                f" ceilings are below what this run reached; {fix}"
            ),
            evidence={
                "ops": len(above),
                "max_efficiency": fastest,
                "step_efficiency": totals.efficiency or float("nan"),
            },
        )
    ]


def time_by_bound(analyses: Sequence[OpAnalysis]) -> defaultdict[Bound | None, float]:
    """Measured seconds of the ops of each bound (None: ops that move and compute nothing)."""
    totals: defaultdict[Bound | None, float] = defaultdict(float)
    for a in analyses:
        totals[a.bound] += a.time_s or 0.0
    return totals


def step_bound(profile: Profile, by_bound: Mapping[Bound | None, float]) -> StepBound:
    """What bounds the profiled step, by the rules `lightspeed trace` applies.

    Host overhead (time outside captured ops, and ops bound by per-op cost) past
    HOST_OVERHEAD_SHARE of the profiled step bounds it on the host; otherwise the
    measured time of memory-bound against compute-bound ops decides, which a trace
    cannot tell but a profile, knowing each op's FLOPs and bytes, can.
    """
    step_s = profile.profiled_step_s or sum(by_bound.values())
    if not step_s:
        return StepBound.UNKNOWN
    host_s = (profile.unattributed_s or 0.0) + by_bound[Bound.OVERHEAD]
    if host_s / step_s >= HOST_OVERHEAD_SHARE:
        return StepBound.CPU_LAUNCH_OVERHEAD
    if by_bound[Bound.MEMORY] > by_bound[Bound.COMPUTE]:
        return StepBound.MEMORY
    on_gpu = profile.workload.device.value != "cpu"
    return StepBound.GPU_COMPUTE if on_gpu else StepBound.CPU_COMPUTE
