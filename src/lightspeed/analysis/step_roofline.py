"""The speed-of-light analysis of a Profile: every op on the roofline, and the step's totals.

Which peak applies to an op: matmul-class ops (those with MACs) run on the matrix
units at the precision of their inputs, at `Hardware.matmul_peak` (AMD Instinct fp32
on MFMA is twice the vector rate); every other op runs on the vector units, so the
fp32 peak applies whatever its dtype. Those ops are almost always memory bound, where
the choice does not change their speed of light.

Which bandwidth: an op whose bytes fit in the hardware's last-level cache can be served
from it, so when the cache bandwidth is known (a calibrated device) that is its roof;
otherwise, and for larger ops, the memory bandwidth. The speed of light is the least
time the op could take, so the faster roof that could apply is the one that does.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from lightspeed.analysis.roofline import RooflinePoint, peak_precision, place_on
from lightspeed.dtypes import Precision, precision_of_dtype
from lightspeed.facts.hardware import Hardware, MemoryLevel
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.rules import Bound, op_bound


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpAnalysis:
    """One op placed on the roofline; `time_s` is its measured time (None if unmeasured)."""

    op: OpRecord
    precision: Precision
    point: RooflinePoint | None  # None for an op that computes and moves nothing
    memory_level: MemoryLevel = MemoryLevel.DRAM  # where its bytes' roof comes from

    @property
    def sol_time_s(self) -> float:
        return 0.0 if self.point is None else self.point.sol_time_s

    @property
    def time_s(self) -> float | None:
        return self.op.time_s

    @property
    def efficiency(self) -> float | None:
        """SoL time / measured time; None when either is unknown or zero."""
        if self.time_s is None or self.time_s <= 0 or self.point is None:
            return None
        return self.sol_time_s / self.time_s

    @property
    def headroom_s(self) -> float | None:
        return None if self.time_s is None else self.time_s - self.sol_time_s

    @property
    def bound(self) -> Bound | None:
        """Compute or memory by the roofline, overhead when per-op cost holds it back
        (`rules.op_bound`); None for an op that computes and moves nothing."""
        if self.point is None:
            return None
        return op_bound(self.point.bound, self.time_s, self.efficiency)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Aggregate:
    """Sums over a group of ops (a phase, a module subtree, the step)."""

    flops: int = 0
    bytes: int = 0
    sol_time_s: float = 0.0
    time_s: float = 0.0  # sum of measured op times (unmeasured ops add nothing)
    op_count: int = 0

    @property
    def efficiency(self) -> float | None:
        """SoL time / measured time; None when nothing was measured."""
        return self.sol_time_s / self.time_s if self.time_s else None

    def __add__(self, other: Aggregate) -> Aggregate:
        return Aggregate(
            flops=self.flops + other.flops,
            bytes=self.bytes + other.bytes,
            sol_time_s=self.sol_time_s + other.sol_time_s,
            time_s=self.time_s + other.time_s,
            op_count=self.op_count + other.op_count,
        )

    @classmethod
    def of(cls, a: OpAnalysis) -> Aggregate:
        return cls(
            flops=a.op.flops,
            bytes=a.op.bytes,
            sol_time_s=a.sol_time_s,
            time_s=a.time_s or 0.0,
            op_count=1,
        )


def op_precision(op: OpRecord, hardware: Hardware) -> Precision:
    """The precision whose peak bounds `op` on `hardware` (see the module docstring)."""
    if op.macs is None:
        return peak_precision(Precision.FP32, hardware)
    precision = peak_precision(operand_precision(op), hardware)
    if (
        precision is Precision.FP32
        and "convolution" in op.name
        and Precision.TF32 in hardware.peak_flops_per_s
        and op.time_s
        and op.flops / op.time_s > hardware.matmul_peak(Precision.FP32)
    ):
        # A convolution faster than fp32 math allows ran on TF32 tensor cores, cuDNN's
        # default. Not a matrix product: cuBLAS's default is fp32, and an fp32 product
        # that reads faster (a share of a node's time, as NeuSight's runs with TF32 off
        # are read) is a measurement to keep against the fp32 peak.
        return Precision.TF32
    return precision


def operand_precision(op: OpRecord) -> Precision:
    """The precision of a matrix op's largest floating input (the later one of equal
    size: a matmul's second operand). Not the last floating input: attention's backward
    takes the fp32 log-sum-exp of its bf16 forward last, an fp8 product its fp32
    scales; a fused RNN backward's byte workspace is not floating at all."""
    best: tuple[int, int, Precision] | None = None
    for i, dtype in enumerate(op.input_dtypes):
        precision = precision_of_dtype(dtype)
        if precision is None:
            continue
        # Hand-built records may leave the shapes out: then the last floating input wins.
        shape = op.input_shapes[i] if i < len(op.input_shapes) else ()
        size = math.prod(shape)
        if best is None or (size, i) >= best[:2]:
            best = (size, i, precision)
    return Precision.FP32 if best is None else best[2]


def analyse_op(op: OpRecord, hardware: Hardware) -> OpAnalysis:
    """Place one op on `hardware`'s roofline."""
    precision = op_precision(op, hardware)
    level = hardware.memory_level(op.bytes)
    point = None
    if op.flops or op.bytes:
        point = place_on(hardware, op.flops, op.bytes, precision, level, matrix=op.macs is not None)
    return OpAnalysis(op=op, precision=precision, point=point, memory_level=level)


def analyse_ops(profile: Profile) -> list[OpAnalysis]:
    """Every op of `profile` on its hardware's roofline, in dispatch order."""
    return [analyse_op(op, profile.hardware) for op in profile.ops]


def by_phase(analyses: Iterable[OpAnalysis]) -> dict[Phase, Aggregate]:
    """Totals per phase, in step order."""
    totals: dict[Phase, Aggregate] = {}
    for a in analyses:
        totals[a.op.phase] = totals.get(a.op.phase, Aggregate()) + Aggregate.of(a)
    return {phase: totals[phase] for phase in Phase if phase in totals}


def by_module(analyses: Iterable[OpAnalysis]) -> dict[str, Aggregate]:
    """Totals per module path, each including its submodules ("" is the whole model)."""
    totals: dict[str, Aggregate] = defaultdict(Aggregate)
    for a in analyses:
        agg = Aggregate.of(a)
        for path in module_ancestors(a.op.module):
            totals[path] = totals[path] + agg
    return dict(totals)


def module_ancestors(module: str) -> list[str]:
    """ "a.b.c" → ["", "a", "a.b", "a.b.c"]; "" → [""]."""
    if not module:
        return [""]
    parts = module.split(".")
    return [""] + [".".join(parts[: i + 1]) for i in range(len(parts))]


def top_headroom(analyses: Sequence[OpAnalysis], n: int) -> list[OpAnalysis]:
    """The `n` measured ops with the most headroom: where to look first."""
    measured = [a for a in analyses if a.headroom_s is not None]
    return sorted(measured, key=lambda a: a.headroom_s or 0.0, reverse=True)[:n]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepTotals:
    """The step against the speed of light.

    efficiency = SoL / step time. achieved = FLOPs / step time. MFU counts the model's
    forward and backward FLOPs; HFU every FLOP executed (recomputation, optimizer), both
    over the step time at the matrix peak of the step's precision. `unknown_flops_time_s`:
    measured time of the ops no FLOP formula covers (their FLOPs count as 0), of
    `op_time_s`, the measured time of all ops; `unknown_flops_ops`: their names.
    """

    flops: int
    bytes: int
    sol_time_s: float
    step_time_s: float | None
    model_flops: int
    peak_flops_per_s: float
    op_time_s: float = 0.0
    unknown_flops_time_s: float = 0.0
    unknown_flops_ops: tuple[str, ...] = ()

    @property
    def unknown_flops_share(self) -> float:
        """Share of the measured op time in ops whose FLOPs are unknown."""
        return self.unknown_flops_time_s / self.op_time_s if self.op_time_s else 0.0

    @property
    def efficiency(self) -> float | None:
        return None if not self.step_time_s else self.sol_time_s / self.step_time_s

    @property
    def achieved_flops_per_s(self) -> float | None:
        return None if not self.step_time_s else self.flops / self.step_time_s

    @property
    def mfu(self) -> float | None:
        if not self.step_time_s:
            return None
        return self.model_flops / (self.step_time_s * self.peak_flops_per_s)

    @property
    def hfu(self) -> float | None:
        if not self.step_time_s:
            return None
        return self.flops / (self.step_time_s * self.peak_flops_per_s)


def step_totals(profile: Profile, analyses: Sequence[OpAnalysis]) -> StepTotals:
    """The totals of `profile`'s step."""
    model_phases = (Phase.FORWARD, Phase.BACKWARD)
    hw = profile.hardware
    peak = hw.matmul_peak(peak_precision(profile.workload.precision, hw))
    return StepTotals(
        flops=sum(a.op.flops for a in analyses),
        bytes=sum(a.op.bytes for a in analyses),
        sol_time_s=sum(a.sol_time_s for a in analyses),
        step_time_s=profile.step_time_s,
        model_flops=sum(a.op.flops for a in analyses if a.op.phase in model_phases),
        peak_flops_per_s=peak,
        op_time_s=sum(a.time_s or 0.0 for a in analyses),
        unknown_flops_time_s=sum(a.time_s or 0.0 for a in analyses if not a.op.flops_known),
        unknown_flops_ops=tuple(dict.fromkeys(a.op.name for a in analyses if not a.op.flops_known)),
    )
