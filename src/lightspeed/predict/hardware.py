"""A measured profile predicted on other hardware, op by op on the two rooflines.

Each op timed on the source is placed on the source's and the target's rooflines, with
its own precision and memory level on each (`analysis.step_roofline.analyse_op`), so an
op may cross the ridge between them. Then (Habitat's rule, per op, from the profile's
own figures instead of GPU counters):

- an op bound by compute or memory keeps its measured fraction of what the hardware
  sustains: t' = t · SoL'_target / SoL'_source, where SoL' is the op's speed of light at
  the rates a GPU sustains (`sustained_hardware`) rather than its datasheet peaks, and
  never below its speed of light on the target (unless it ran below that on the source
  too, by as much);
- an op bound by per-op overhead (`rules.op_bound`: small and under half its speed of
  light) keeps its measured time, the host's dispatch cost, which the device does not
  change; it never runs below its speed of light on the target;
- an op that computes and moves nothing, or was not timed, keeps its time, and so does
  the step's time outside captured ops (`Profile.unattributed_s`);
- the step time: the measured step × (Σ t' + outside) / (Σ t + outside).

What a GPU sustains: a board draws no more than its power limit, and a FLOP of fp32
math on the vector units (CUDA cores) costs energy, so a GPU's fp32 vector rate is
capped at board power × FLOP per joule; no rate exceeds a share of the datasheet peak.
A 70 W T4 sustains about half of its 8.1 TFLOP/s in fp32 matrix products, a 250 W V100
nearly all of its 14 (NeuSight's published measurements). The energy of a FLOP falls as
transistors shrink — switched capacitance goes with a transistor's length, the inverse
square root of the chip's transistor density — so the FLOP per joule grows with √(density
/ `REFERENCE_DENSITY`); a chip whose density the catalog lacks is taken at the reference.
(The 16 nm P4 and the 12 nm T4, of the same density, reach the same FLOP per joule in
those measurements: the process's name says less than its density.) The two constants
(`SUSTAINED`) are fitted on those one-by-one fp32 products of five NVIDIA GPUs and
validated leave-one-GPU-out (`benchmarks/published_gpus.py`); no constant belongs to one
GPU: GPUs differ only by their catalog figures. Matrix units (tensor cores, AMD's fp32
MFMA) are only held to the share: their energy per FLOP, lower than the vector units',
is not modelled. A calibrated device's peaks are already what it sustains and are kept.

Memory is the same tensors on either device, so it is kept; whether it fits the
target's memory is an assumption the prediction states. The workload's device becomes
the target's kind (a GPU's is `cuda`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections import defaultdict
from importlib import resources
from typing import Any

from lightspeed import units
from lightspeed.analysis.step_roofline import OpAnalysis, analyse_op
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind, Hardware
from lightspeed.facts.profile import CarriedOps, CarryValidation, Prediction, Profile
from lightspeed.facts.records import OpRecord
from lightspeed.predict.carry import scaled_step
from lightspeed.rules import Bound


@dataclasses.dataclass(frozen=True)
class SustainedRates:
    """What a GPU sustains of its datasheet compute peaks, from its catalog figures.

    `flops_per_joule`: FLOP of fp32 vector math a board does per joule of its power
    limit, for a chip of `REFERENCE_DENSITY` transistors per mm². `peak_share`: the
    largest share of a datasheet peak that compute-bound work sustains (0–1)."""

    flops_per_joule: float
    peak_share: float


# Fitted by `benchmarks/published_gpus.py --fit` on NeuSight's fp32 products measured one
# by one (gemm_fp32.csv: P4, P100, T4, V100, A100-PCIe); docs/benchmarks.md has the
# leave-one-GPU-out figures.
# Transistors per mm² the FLOP per joule is given at: the 16 and 12 nm chips of the
# Pascal, Volta and Turing GPUs (GP100 25.1, GV100 25.9, TU104 25.0 million).
REFERENCE_DENSITY = 25e6
SUSTAINED = SustainedRates(flops_per_joule=64e9, peak_share=0.95)

RULES = (
    "each op timed on the source keeps its fraction of the speed of light on the target:"
    " time × SoL on the target / SoL on the source (each on its own roofline, with its own"
    " bound), at the rates a GPU sustains: a share of each peak, the fp32 vector rate"
    " capped at the board's power × the FLOP a joule buys on its chip",
    "ops bound by per-op overhead keep their measured time (the host's dispatch cost),"
    " never below their SoL on the target",
    "untimed ops, ops with no work and the time outside ops are kept",
    "step time: the measured step scaled by the profiled ops' time plus the time outside"
    " them, predicted over measured",
)


def sustained_hardware(hw: Hardware, rates: SustainedRates = SUSTAINED) -> Hardware:
    """`hw` with each compute peak at the rate it sustains (see the module's docstring):
    `rates.peak_share` of it, and the fp32 vector rate capped at the board's power ×
    `rates.flops_per_joule` × √(transistor density / `REFERENCE_DENSITY`). A device with
    no board power in the catalog is only scaled by the share; a calibrated device is
    returned as it is."""
    if hw.kind is not DeviceKind.GPU or hw.calibration is not None:
        return hw
    # Hardware holds mappings, so it is not hashable: key the cache on what sets the rates.
    key = (
        hw.id,
        tuple(hw.peak_flops_per_s.items()),
        tuple(hw.matrix_peak_flops_per_s.items()),
        hw.board_power_w,
        hw.transistors_per_mm2,
        rates,
    )
    found = _SUSTAINED_CACHE.get(key)
    if found is None:
        found = _SUSTAINED_CACHE[key] = _sustained(hw, rates)
    return found


_SUSTAINED_CACHE: dict[tuple[Any, ...], Hardware] = {}


def _sustained(hw: Hardware, rates: SustainedRates) -> Hardware:
    cap = None
    if hw.board_power_w:
        shrink = math.sqrt((hw.transistors_per_mm2 or REFERENCE_DENSITY) / REFERENCE_DENSITY)
        cap = hw.board_power_w * rates.flops_per_joule * shrink

    def held(precision: Precision, peak: float) -> float:
        rate = peak * rates.peak_share
        return min(rate, cap) if cap is not None and precision is Precision.FP32 else rate

    share = rates.peak_share
    return dataclasses.replace(
        hw,
        peak_flops_per_s={p: held(p, v) for p, v in hw.peak_flops_per_s.items()},
        matrix_peak_flops_per_s={p: v * share for p, v in hw.matrix_peak_flops_per_s.items()},
    )


def carry_time(
    op: OpRecord, source: Hardware, target: Hardware, rates: SustainedRates = SUSTAINED
) -> float:
    """Seconds `op`, measured on `source` (its `time_s`), takes on `target` (see the
    module's docstring); its measured time where it has none to carry. The one rule every
    cross-hardware prediction uses: a profile's ops, a trace's, a serving plan's.
    `rates`: what GPUs sustain (the benchmark refits them, leaving out a GPU)."""
    if op.time_s is None:
        return 0.0
    return _carry(op, analyse_op(op, source), source, target, rates)


def _carry(
    op: OpRecord, before: OpAnalysis, source: Hardware, target: Hardware, rates: SustainedRates
) -> float:
    """`carry_time` of a timed `op` already placed on its source (`before`)."""
    measured = op.time_s
    assert measured is not None
    if before.point is None:
        return measured
    if before.bound is Bound.OVERHEAD:
        return max(measured, analyse_op(op, target).sol_time_s)
    was = analyse_op(op, sustained_hardware(source, rates)).sol_time_s
    now = analyse_op(op, sustained_hardware(target, rates)).sol_time_s
    if was <= 0:
        return measured
    # An op that beat what its source sustains (a short burst above the power cap) is
    # still held to the target's datasheet speed of light, unless it beat its source's
    # too (then by as much).
    sol = analyse_op(op, target).sol_time_s
    floor = min(sol, measured * (sol / before.sol_time_s))  # exact when nothing changes
    return max(measured * (now / was), floor)


# The kinds of op a prediction carries over, in report order, with the rule each follows.
FP32_PRODUCTS = "fp32 products"
OTHER_PRODUCTS = "other products"
OTHER_OPS = "other ops"
OVERHEAD_OPS = "overhead-bound"
NO_WORK = "no work"
OUTSIDE = "outside ops"
STEP = "step"
CARRY_RULES = {
    FP32_PRODUCTS: "fp32 matrix products: time × SoL on the target / SoL on the source, at"
    " the rates each sustains (a share of the peak; fp32 on vector units capped at board"
    " power × FLOP per joule)",
    OTHER_PRODUCTS: "matrix products in other precisions: time × SoL on the target / SoL on"
    " the source, at a share of each datasheet peak (tensor-core energy not modelled)",
    OTHER_OPS: "ops other than matrix products: time × SoL on the target / SoL on the"
    " source; the fraction of the bandwidth (or vector rate) reached is kept",
    OVERHEAD_OPS: "ops bound by per-op overhead: measured time kept (the host's dispatch"
    " cost), never below the target's SoL",
    NO_WORK: "ops that compute and move nothing, or were not timed: measured time kept",
    OUTSIDE: "the profiled step's time outside ops: kept; the step scales by the ops' time"
    " plus it, predicted over measured",
    STEP: "the measured step × (Σ t' + time outside ops) / (Σ t + time outside ops)",
}


def carry_kind(op: OpRecord, source: Hardware) -> str:
    """Which of `CARRY_RULES` carries `op`, measured on `source`, to other hardware."""
    return _kind(op, analyse_op(op, source))


def _kind(op: OpRecord, placed: OpAnalysis) -> str:
    """`carry_kind` of `op` already placed on its source."""
    if op.time_s is None or placed.point is None:
        return NO_WORK
    if placed.bound is Bound.OVERHEAD:
        return OVERHEAD_OPS
    if op.macs is not None:
        return FP32_PRODUCTS if placed.precision is Precision.FP32 else OTHER_PRODUCTS
    return OTHER_OPS


@functools.cache
def validation() -> dict[str, Any]:
    """The measured errors of cross-GPU predictions (`validation.json`, written by
    `benchmarks/published_gpus.py --write-validation`), by kind of op."""
    text = resources.files("lightspeed.predict").joinpath("validation.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def validation_group(source_vendor: str | None, target_vendor: str | None) -> str:
    """The group of `validation.json` a prediction between GPUs of these vendors is
    checked in: the vendor's own ("nvidia", "amd"), or "across vendors"."""
    if source_vendor != target_vendor:
        return "across vendors"
    return source_vendor or "unknown"


def _validated(kind: str, profile: Profile, target: Hardware) -> CarryValidation | None:
    """How well `kind` was checked between GPUs of the vendors of `profile`'s hardware
    and `target`, in fp32; None when it was not, or when the hardware is not two catalog
    GPUs (a CPU, a calibrated device) or the step is not fp32."""
    source = profile.hardware
    if (
        DeviceKind.CPU in (source.kind, target.kind)
        or source.calibration
        or target.calibration
        or profile.workload.precision is not Precision.FP32
    ):
        return None
    group = validation_group(source.vendor, target.vendor)
    found = validation()["groups"].get(group, {}).get(kind)
    return None if found is None else CarryValidation(**found)


def on_hardware(profile: Profile, target: Hardware, rates: SustainedRates = SUSTAINED) -> Profile:
    """`profile` predicted on `target` (see the module's docstring); `rates`: what GPUs
    sustain (see `carry_time`)."""
    source = profile.hardware
    placed = [analyse_op(op, source) for op in profile.ops]
    ops = tuple(
        op
        if op.time_s is None
        else dataclasses.replace(op, time_s=_carry(op, before, source, target, rates))
        for op, before in zip(profile.ops, placed, strict=True)
    )
    timing, profiled = scaled_step(profile, ops)
    device = Device.CUDA if target.kind is DeviceKind.GPU else Device.CPU
    step = None if timing is None else timing.median_s
    kinds = [_kind(op, before) for op, before in zip(profile.ops, placed, strict=True)]
    carried = _carried(profile, ops, kinds, target, step)
    return dataclasses.replace(
        profile,
        workload=dataclasses.replace(profile.workload, device=device),
        hardware=target,
        ops=ops,
        timing=timing,
        profiled_step_s=profiled,
        prediction=Prediction(
            changes={"hardware": target.id},
            source_hardware=source.id,
            measured_step_time_s=profile.step_time_s,
            rules=RULES,
            assumptions=_assumptions(profile, target),
            validated=_validated(STEP, profile, target) is not None,
            carried=carried,
        ),
    )


def _carried(
    profile: Profile,
    predicted: tuple[OpRecord, ...],
    kinds: list[str],
    target: Hardware,
    step_s: float | None,
) -> tuple[CarriedOps, ...]:
    """Each kind of op (`kinds`, one per op): how many, their time measured and
    predicted, the rule, and how well it has been validated; the step itself last (when
    it was timed)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for kind, before, after in zip(kinds, profile.ops, predicted, strict=True):
        row = sums[kind]
        row[0] += 1
        row[1] += before.time_s or 0.0
        row[2] += after.time_s or 0.0
    if profile.unattributed_s:
        sums[OUTSIDE] = [0, profile.unattributed_s, profile.unattributed_s]
    rows = [
        CarriedOps(
            kind=kind,
            rule=CARRY_RULES[kind],
            ops=int(sums[kind][0]),
            measured_s=sums[kind][1],
            predicted_s=sums[kind][2],
            validation=_validated(kind, profile, target),
        )
        for kind in CARRY_RULES
        if kind in sums
    ]
    measured_step = profile.step_time_s
    if measured_step is not None and step_s is not None:
        rows.append(
            CarriedOps(
                kind=STEP,
                rule=CARRY_RULES[STEP],
                ops=len(predicted),
                measured_s=measured_step,
                predicted_s=step_s,
                validation=_validated(STEP, profile, target),
            )
        )
    return tuple(rows)


def _assumptions(profile: Profile, target: Hardware) -> tuple[str, ...]:
    """What the prediction takes for granted that a reader should know."""
    source = profile.hardware
    said = [
        "tensor-core eligibility is not modelled: matrix products in shapes the target's"
        " tensor cores cannot fully use are placed at their precision's peak all the same",
    ]
    if source.kind is not target.kind:
        said.append(
            f"from a {source.kind.value} to a {target.kind.value}: fractions of the speed of"
            " light carried across device kinds, and the host's per-op cost, are not"
            " validated"
        )
    memory = profile.memory
    if memory is not None and target.memory_bytes and memory.peak_bytes > target.memory_bytes:
        said.append(
            f"the step's peak memory, {units.size(memory.peak_bytes)}, exceeds the target's"
            f" {units.size(target.memory_bytes)}: it would not run there as it is"
        )
    return tuple(said)
