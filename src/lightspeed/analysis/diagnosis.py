"""The profile's diagnosis: its step reduced to `rules.StepFacts`, so the rules that
diagnose traces name its bound and findings, plus the findings only a profile can
make (its distance to the speed of light, ceilings below what the run reached)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from lightspeed.analysis.layer_advice import convolution_findings, recurrent_findings
from lightspeed.analysis.roofline import peak_precision
from lightspeed.analysis.step_roofline import OpAnalysis, StepTotals
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind, Hardware, MemoryLevel
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.rules import (
    ABOVE_SOL_TOLERANCE,
    UNKNOWN_FLOPS_SHARE,
    Bound,
    Diagnosis,
    Finding,
    FindingKind,
    StepFacts,
    aligned_batch_sizes,
    diagnose,
    padded,
    unaligned_dims,
)


def matmul_dims(op: OpRecord) -> dict[str, int] | None:
    """The M, K, N (or channel) dimensions of a forward matmul or convolution, if it is one."""
    shapes = op.input_shapes
    name = op.name.removeprefix("aten::")
    if len(shapes) < 2:  # not recorded
        return None
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


def time_by_bound(analyses: Sequence[OpAnalysis]) -> defaultdict[Bound | None, float]:
    """Measured seconds of the ops of each bound (None: ops that move and compute nothing)."""
    totals: defaultdict[Bound | None, float] = defaultdict(float)
    for a in analyses:
        totals[a.bound] += a.time_s or 0.0
    return totals


def _tensor_core_precision(a: OpAnalysis, hardware: Hardware) -> Precision:
    # fp32 matmuls run on TF32 tensor cores where the GPU has them (PyTorch's default
    # for convolutions, and for matmuls under torch.set_float32_matmul_precision).
    if a.precision is Precision.FP32 and Precision.TF32 in hardware.peak_flops_per_s:
        return Precision.TF32
    return a.precision


def step_facts(profile: Profile, analyses: Sequence[OpAnalysis]) -> StepFacts:
    """The profiled step as the rules read it: host overhead is the time outside any
    captured op plus the ops bound by per-op cost; busy time splits by op bound. The
    step is at least its ops' time, so no part of it is a share above the whole: over
    several profiled steps the per-op medians may sum past the median step
    (`measure.op_times`), and a prediction carries that over."""
    by_bound = time_by_bound(analyses)
    measured_s = sum(by_bound.values())
    outside_s = profile.unattributed_s or 0.0
    small_s = by_bound[Bound.OVERHEAD]
    facts = StepFacts(
        step_s=max(profile.profiled_step_s or 0.0, measured_s),
        device=profile.workload.device is not Device.CPU,
        ops=len(analyses),
        overhead_s=outside_s + small_s,
        overhead_parts={"outside_ops": outside_s, "in_small_ops": small_s},
        compute_s=by_bound[Bound.COMPUTE],
        memory_s=by_bound[Bound.MEMORY],
        busy_s=measured_s,
    )
    if profile.hardware.kind is not DeviceKind.GPU:
        return facts
    return _with_tensor_core_shapes(facts, analyses, profile.hardware, profile.workload.batch_size)


def _with_tensor_core_shapes(
    facts: StepFacts, analyses: Sequence[OpAnalysis], hardware: Hardware, batch_size: int
) -> StepFacts:
    """`facts` with the time of matmuls and convolutions in shapes tensor cores cannot
    fully use, the costliest of them as an example, and the batch sizes that would align
    the costliest forward product whose misaligned rows are batch × sequence."""
    unaligned_s = excess_s = 0.0
    precisions: set[Precision] = set()
    worst: tuple[float, str] | None = None
    batches: tuple[float, tuple[int, ...]] | None = None
    for a in analyses:
        dims = matmul_dims(a.op)
        precision = _tensor_core_precision(a, hardware)
        bad = None if dims is None else unaligned_dims(dims, precision)
        if not bad or dims is None:
            continue
        time_s = a.time_s or 0.0
        unaligned_s += time_s
        excess_s += max(0.0, time_s - a.sol_time_s)
        precisions.add(precision)
        shape = "×".join(f"{k}={v}" for k, v in dims.items())
        fixed = "×".join(f"{k}={v}" for k, v in padded(dims, precision).items())
        where = a.op.module or "the model root"
        example = f"{a.op.name} in {where} has {shape}: pad to {fixed}"
        if worst is None or time_s > worst[0]:
            worst = (time_s, example)
        # A forward product's rows (M) are the activations': batch × sequence when the
        # batch divides them. Backward products carry the same rows as K.
        sizes = (
            aligned_batch_sizes(batch_size, dims["M"], precision)
            if "M" in bad and a.op.phase is Phase.FORWARD
            else None
        )
        if sizes and (batches is None or time_s > batches[0]):
            batches = (time_s, sizes)
    if not precisions:
        return facts
    return dataclasses.replace(
        facts,
        unaligned_s=unaligned_s,
        unaligned_excess_s=excess_s,
        unaligned_precisions=tuple(sorted(precisions)),
        unaligned_example=None if worst is None else worst[1],
        batch_size=batch_size,
        aligned_batch_sizes=() if batches is None else batches[1],
    )


def profile_findings(
    profile: Profile, analyses: Sequence[OpAnalysis], totals: StepTotals
) -> list[Finding]:
    """The findings only a profile can make: ceilings below what the run reached, layers
    whose shapes or layout show what to change (`layer_advice`), and how far the step runs
    from its speed of light."""
    findings = above_speed_of_light(profile.hardware, analyses, totals)
    step_s = max(profile.profiled_step_s or 0.0, totals.op_time_s)  # as `step_facts`
    if step_s > 0:
        findings += convolution_findings(profile, analyses, step_s)
        findings += recurrent_findings(profile, analyses, step_s)
    if totals.unknown_flops_share > UNKNOWN_FLOPS_SHARE:
        names = ", ".join(totals.unknown_flops_ops[:5])
        more = len(totals.unknown_flops_ops) - 5
        findings.append(
            Finding(
                kind=FindingKind.UNKNOWN_FLOPS,
                message=(
                    f"{100 * totals.unknown_flops_share:.1f}% of the op time is in ops with no"
                    f" FLOP formula ({names}{f' and {more} more' if more > 0 else ''}): their"
                    " FLOPs count as 0, so the step's FLOPs, MFU and speed of light understate"
                    " it; this is lightspeed's gap, not the model's"
                ),
                evidence={
                    "unknown_flops_time_s": totals.unknown_flops_time_s,
                    "op_time_s": totals.op_time_s,
                    "ops": ", ".join(totals.unknown_flops_ops),
                },
            )
        )
    if totals.efficiency is not None and totals.efficiency <= 1:
        findings.append(
            Finding(
                kind=FindingKind.SPEED_OF_LIGHT,
                message=(
                    f"the step runs at {100 * totals.efficiency:.1f}% of the speed of light on"
                    f" {profile.hardware.name}: at most {1 / max(totals.efficiency, 1e-12):.1f}×"
                    " faster with perfect kernels and no overhead"
                ),
                evidence={
                    "sol_time_s": totals.sol_time_s,
                    "step_time_s": totals.step_time_s or 0.0,
                    "max_speedup": 1 / max(totals.efficiency, 1e-12),
                },
            )
        )
    return findings


def above_speed_of_light(
    hardware: Hardware, analyses: Sequence[OpAnalysis], totals: StepTotals
) -> list[Finding]:
    """Ops (or the step) measured faster than their speed of light allows.

    No real run beats the speed of light of the hardware it ran on, so a ceiling is
    missing: on a calibrated device, the calibration has no kernel as fast as the op
    (its layout, shape or read:write mix), and the finding names the op and the kernel
    that set the roof it beat; on a datasheet device, the run was on another device.
    """
    limit = 1 + ABOVE_SOL_TOLERANCE
    above = [a for a in analyses if (a.efficiency or 0.0) > limit]
    step_above = (totals.efficiency or 0.0) > 1
    if not above and not step_above:
        return []
    fastest = max([a.efficiency or 0.0 for a in above] + [totals.efficiency or 0.0])
    what = (
        f"{len(above)} ops{' and the step' if step_above else ''} ran faster than the speed"
        f" of light of {hardware.name} (up to {100 * fastest:.0f}%)"
    )
    evidence: dict[str, float | str] = {
        "ops": len(above),
        "max_efficiency": fastest,
        "step_efficiency": totals.efficiency or float("nan"),
    }
    if not above:
        detail = ": the step's roofs are below what it reached"
    else:
        worst = max(above, key=lambda a: a.efficiency or 0.0)
        roof, kernel = beaten_roof(hardware, worst)
        where = f" in {worst.op.module}" if worst.op.module else ""
        detail = (
            f"; {worst.op.name}{where} ({shape_text(worst.op)}) reached"
            f" {100 * (worst.efficiency or 0.0):.0f}% of its {roof}"
            + (f", set by the calibration kernel {kernel}" if kernel else "")
        )
        evidence |= {"op": worst.op.name, "roof": roof, "kernel": kernel or ""}
    if hardware.calibration is not None:
        fix = (
            "the calibration lacks a kernel as fast as this op, so its ceiling is too low"
            " for it: report the op and its shapes so the kernel set can cover it"
        )
    else:
        fix = "check that --hardware names the device the step ran on"
    return [
        Finding(
            kind=FindingKind.ABOVE_SPEED_OF_LIGHT,
            message=f"{what}{detail}; {fix}",
            evidence=evidence,
        )
    ]


def beaten_roof(hardware: Hardware, analysis: OpAnalysis) -> tuple[str, str | None]:
    """(the roof that set `analysis`'s speed of light, the calibration kernel that set
    that roof, if known): `fp32 peak` and `mm-nt n=512`, or `cache bandwidth` and
    `scale 1:1`."""
    point = analysis.point
    cal = hardware.calibration
    if point is not None and point.compute_time_s >= point.memory_time_s:
        precision = peak_precision(analysis.precision, hardware)
        matrix = analysis.op.macs is not None and precision in hardware.matrix_peak_flops_per_s
        roof = f"{precision.value} matrix peak" if matrix else f"{precision.value} peak"
        return roof, None if cal is None else cal.peak_kernel(precision)
    level = analysis.memory_level
    name = "cache bandwidth" if level is MemoryLevel.CACHE else "memory bandwidth"
    return name, None if cal is None else cal.memory_roof_kernel(level)


def shape_text(op: OpRecord) -> str:
    """The op's input shapes, as `768×3072, 768×3072`; `shapes unknown` when unrecorded."""
    return shapes_text(op.input_shapes)


def shapes_text(shapes: Sequence[Sequence[int]]) -> str:
    """Shapes as `768×3072, 768×3072` (a 0-d one as `scalar`); `shapes unknown` for none."""
    if not shapes:
        return "shapes unknown"
    return ", ".join("×".join(map(str, shape)) or "scalar" for shape in shapes)


def diagnose_profile(
    profile: Profile, analyses: Sequence[OpAnalysis], totals: StepTotals
) -> Diagnosis:
    """The profiled step's bound and findings, by the rules a trace is diagnosed with."""
    return diagnose(step_facts(profile, analyses), profile_findings(profile, analyses, totals))
