"""One job's step predicted as K jobs fused into one (`optimize.fusion.fuse`).

Fusing K jobs of one architecture runs every op once on K jobs' tensors: a matrix
product becomes a batched one, an elementwise op runs on K times the elements. What
the host spends on an op (dispatching it, the autograd engine's bookkeeping) is then
paid once for the K jobs, while the op's work, its FLOPs and bytes, is done K times.
From the measured profile of one job:

- the fixed cost of an op, c, is what the ops with the least work take: the median
  time of the quarter of the ops (among those that compute or move something) with the
  shortest speed of light;
- each op keeps its fixed cost once and does its work K times at no worse a speed:
  t' = min(t, c) + K · max(t − c, 0) (K times the FLOPs and bytes, at the same
  fraction of the speed of light); where the profile holds enough ops of the op's name,
  of sizes far enough apart, to fit the time they add per second of speed of light
  (`predict.carry.marginal_cost`), the K − 1 jobs' work is added at that rate when it is
  the faster: small matrix products run far from their speed of light, larger ones
  nearer it;
- an op vmap has no batching rule for (`JOB_BY_JOB`) runs once a job: K · t;
- the update is the fused optimizer's: PyTorch's fused kernel once a job, one pass over
  the job's parameters, gradients and optimizer state (c plus its speed of light at the
  median efficiency of the measured ops bound by compute or memory), and the update's
  checks of each job's gradients, at c an op;
- the time outside ops (Python, the autograd engine) is paid once;
- the step time moves by the change in the sum (`predict.carry.shifted_step`);
- every memory category holds K jobs' tensors: K times the bytes, peak included.

The speed-up is the K jobs run one after another (K × the measured step) over the
fused step. Where it is small the step's time is its ops' work, as on a compute-bound
step, and fusion will not help. The largest K is the most jobs whose fused peak fits
the hardware's memory.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from lightspeed import units
from lightspeed.analysis.step_roofline import OpAnalysis, analyse_ops
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import FusionPrediction, Prediction, Profile
from lightspeed.facts.records import OPTIMIZER_MODULE, MemoryBreakdown, OpRecord, Phase
from lightspeed.facts.timing import Measurement
from lightspeed.predict.carry import (
    added_op_time,
    carry_sol_s,
    marginal_cost,
    shifted_step,
    slowdowns,
)

__all__ = [
    "FUSION_HELPS",
    "RULES",
    "fixed_op_cost_s",
    "fusion_verdict",
    "largest_k",
    "on_fused",
]

# The least predicted speed-up at which fusion is worth its trouble (a sweep's jobs
# rewritten into one, memory K times).
FUSION_HELPS = 1.2

# The share of the ops that do work, those with the least, whose times are taken as
# nothing but their fixed cost.
FIXED_COST_SHARE = 0.25

# Ops PyTorch's vmap has no batching rule for (it says so when the fused step first
# runs; torch 2.13), which the fused jobs run one job at a time, forward and backward.
JOB_BY_JOB = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    }
)

# The ops the fused update (`FusedOptimizer.step`) runs besides its kernels: for each
# parameter tensor its gradient's per-job sums (the check for non-finite gradients) and
# its per-job views; once a step, the check's verdict, the skip counts and the step
# counts. Views that compute nothing are left out (tests/predict/
# test_fusion_prediction.py counts them on the implementation).
UPDATE_OPS_PER_TENSOR = 2
UPDATE_OPS_PER_STEP = 12

RULES = (
    "an op's fixed cost c: the median time of the quarter of the ops with the least work"
    " (the shortest speed of light)",
    "each op pays its fixed cost once and does its work K times at the same speed:"
    " t' = min(t, c) + K · max(t − c, 0), or, where the profile's ops of its name fit the"
    " time added per second of speed of light and that is faster, t plus K − 1 times its"
    " speed of light at that rate",
    "an op vmap has no batching rule for runs once a job: K · t",
    "the update: PyTorch's fused kernel once a job over its parameters, gradients and"
    " optimizer state (c plus its speed of light at the median efficiency of the measured"
    " ops), and the checks of each job's gradients at c an op",
    "the time outside ops (Python, the autograd engine) is paid once for the K jobs",
    "every memory category holds K jobs' tensors (K times the bytes)",
    "speed-up: K measured steps run one after another over the fused step",
)


def on_fused(profile: Profile, k: int) -> Profile:
    """`profile` (one job's step) predicted as `k` jobs fused into one step (see the
    module's docstring): its ops, step time in seconds, memory, and a `Prediction`
    whose `fusion` holds the speed-up and the largest K that fits."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"--fuse {k!r} must be a whole number of jobs, at least 1.")
    step = profile.step_time_s
    if not step:
        raise ConfigError(
            f"the profile of {profile.workload.name!r} has no measured step time to predict"
            " fusion from."
        )
    cost = fixed_op_cost_s(analyse_ops(profile))
    slopes = marginal_cost(profile.ops, profile.hardware)
    update = _fused_update(profile, k, cost)
    ops = tuple(
        _fused_op(op, k, cost, slopes.get(op.name), profile.hardware)
        for op in profile.ops
        if update is None or op.phase is not Phase.OPTIMIZER
    ) + tuple(
        dataclasses.replace(op, index=len(profile.ops) + j) for j, op in enumerate(update or ())
    )
    timed = any(op.time_s is not None for op in profile.ops)
    outside = profile.unattributed_s
    timing, profiled = shifted_step(profile, ops, outside) if timed else _scaled(profile, k)
    fused = dataclasses.replace(
        profile,
        workload=dataclasses.replace(
            profile.workload,
            name=f"{profile.workload.name}+fuse{k}",
            batch_size=k * profile.workload.batch_size,
            parameter_count=None
            if profile.workload.parameter_count is None
            else k * profile.workload.parameter_count,
        ),
        ops=ops,
        timing=timing,
        profiled_step_s=profiled,
        memory=None if profile.memory is None else _memory(profile.memory, k),
    )
    fused_step = fused.step_time_s or 0.0
    speedup = k * step / fused_step if fused_step > 0 else 0.0
    work = sum(max(op.time_s - cost, 0.0) for op in profile.ops if op.time_s is not None)
    profiled = profile.profiled_step_s or step
    share = 1.0 - work / profiled if profiled > 0 else 0.0
    verdict = FusionPrediction(
        jobs=k,
        serial_step_s=k * step,
        fused_step_s=fused_step,
        speedup=speedup,
        overhead_share=min(1.0, max(0.0, share)),
        largest_jobs=largest_k(profile),
        helps=speedup >= FUSION_HELPS,
    )
    return dataclasses.replace(
        fused,
        prediction=Prediction(
            changes={"fuse": str(k)},
            source_hardware=profile.hardware.id,
            measured_step_time_s=step,
            rules=RULES,
            assumptions=_assumptions(profile, verdict, cost, timed),
            fusion=verdict,
        ),
    )


def fusion_verdict(helps: bool, overhead_share: float, jobs: int) -> str:
    """Whether fusing `jobs` jobs is worth it (`helps`: the predicted speed-up reaches
    `FUSION_HELPS`), and why, in one sentence: `overhead_share` (a fraction of a job's
    step) is what fusion pays once for all the jobs."""
    if helps:
        return (
            f"fusion pays: {overhead_share:.0%} of a job's step is overhead paid once for"
            f" all {jobs}"
        )
    return (
        f"fusion will not help: {1 - overhead_share:.0%} of a job's step is its ops' work"
        f" (compute and memory traffic), which {jobs} fused jobs still do once each"
    )


def largest_k(profile: Profile) -> int | None:
    """The most jobs whose fused step's peak (K times one job's) fits the hardware's
    memory; None where the memory or the peak is not known."""
    limit = profile.hardware.memory_bytes
    if not limit or profile.memory is None or profile.memory.peak_bytes <= 0:
        return None
    return limit // profile.memory.peak_bytes


def fixed_op_cost_s(analyses: Sequence[OpAnalysis]) -> float:
    """An op's fixed cost, in seconds: the median measured time of the quarter of the
    timed ops that compute or move something with the shortest speed of light (0: none
    timed)."""
    working = sorted(
        (a.sol_time_s, a.op.time_s) for a in analyses if a.op.time_s and a.sol_time_s > 0
    )
    least = [t for _, t in working[: max(1, round(FIXED_COST_SHARE * len(working)))]]
    return statistics.median(least) if working else 0.0


def _fused_op(
    op: OpRecord, k: int, cost: float, slope: float | None, hardware: Hardware
) -> OpRecord:
    time = op.time_s
    if time is not None:
        alike = min(time, cost) + k * max(time - cost, 0.0)
        if op.name in JOB_BY_JOB:
            time = k * time
        elif slope is not None:
            # The K − 1 jobs' work added at the rate the profile's own ops of this name
            # add time per second of speed of light: a larger op of a kind whose small
            # ones are slow for their size runs nearer its speed of light (and no
            # slower than at the same efficiency).
            sol = carry_sol_s(op, hardware)
            time = min(alike, time + slope * (k - 1) * sol)
        else:
            time = alike
    return dataclasses.replace(
        op,
        input_shapes=tuple((k, *s) for s in op.input_shapes),
        output_shapes=tuple((k, *s) for s in op.output_shapes),
        flops=k * op.flops,
        macs=None if op.macs is None else k * op.macs,
        bytes_read=k * op.bytes_read,
        bytes_written=k * op.bytes_written,
        time_s=time,
    )


def _fused_update(profile: Profile, k: int, cost: float) -> list[OpRecord] | None:
    """The fused jobs' update (`optimize.fusion.optimizer.FusedOptimizer`): PyTorch's fused
    kernel once a job, one pass over the job's parameters, gradients and optimizer state
    (reading all, writing the parameters and the state), with the arithmetic of the
    measured update; each at the fixed cost c plus its speed of light at the median
    efficiency of the measured ops bound by compute or memory. None where the profile
    holds no update or no memory categories to size it by."""
    memory = profile.memory
    update = [op for op in profile.ops if op.phase is Phase.OPTIMIZER]
    if memory is None or memory.parameters_bytes <= 0 or not update:
        return None
    params = memory.parameters_bytes
    states = round(memory.optimizer_state_bytes / params)
    first = update[0]
    dtype = first.input_dtypes[0] if first.input_dtypes else "float32"
    kernel = OpRecord(
        index=0,
        name="aten::_fused_adam_" if states >= 2 else "aten::_fused_sgd_",
        module=OPTIMIZER_MODULE,
        phase=Phase.OPTIMIZER,
        input_shapes=(),
        input_dtypes=(dtype,),
        output_shapes=(),
        output_dtypes=(),
        flops=sum(op.flops for op in update),
        macs=None,
        bytes_read=params * (2 + states),
        bytes_written=params * (1 + states),
    )
    found = slowdowns(profile.ops, profile.hardware, cost)
    time = added_op_time(kernel, found, profile.hardware, cost)
    tensors = profile.workload.parameter_tensors or 0
    checks = dataclasses.replace(
        kernel,
        name="fused update: checks and views",
        flops=0,
        bytes_read=0,
        bytes_written=0,
        time_s=cost * (UPDATE_OPS_PER_TENSOR * tensors + UPDATE_OPS_PER_STEP),
    )
    return [*(dataclasses.replace(kernel, time_s=time) for _ in range(k)), checks]


def _scaled(profile: Profile, k: int) -> tuple[Measurement | None, float | None]:
    """Without op times nothing tells overhead from work: the step is taken as all
    work, K times as long (the speed-up 1, the bound that cannot mislead)."""
    timing = profile.timing
    if timing is not None:
        timing = dataclasses.replace(timing, times_s=tuple(k * t for t in timing.times_s))
    profiled = profile.profiled_step_s
    return timing, None if profiled is None else k * profiled


def _memory(memory: MemoryBreakdown, k: int) -> MemoryBreakdown:
    return dataclasses.replace(
        memory,
        parameters_bytes=k * memory.parameters_bytes,
        gradients_bytes=k * memory.gradients_bytes,
        optimizer_state_bytes=k * memory.optimizer_state_bytes,
        activations_bytes=k * memory.activations_bytes,
        temporaries_bytes=k * memory.temporaries_bytes,
        inputs_bytes=k * memory.inputs_bytes,
        peak_bytes=k * memory.peak_bytes,
        at_peak_bytes={name: k * b for name, b in memory.at_peak_bytes.items()},
        over_step=None,
    )


def _assumptions(
    profile: Profile, verdict: FusionPrediction, cost: float, timed: bool
) -> tuple[str, ...]:
    said = [
        f"c = {units.seconds(cost)} an op",
        f"{verdict.overhead_share:.0%} of the measured step is paid once (the ops' fixed"
        f" costs and the time outside ops); the rest, the ops' work, is done"
        f" {verdict.jobs} times",
        "an nn.Sequential of Linear, normalisation, dropout and activation layers runs"
        " as batched ops; another model runs under torch.func.vmap, whose own cost per op"
        " (and its copies around an op it runs job by job) is not counted",
        "the fused update runs PyTorch's fused kernel once a job, which a job alone also"
        " reaches with its optimizer's fused=True: part of the speed-up is that kernel's",
    ]
    if not timed:
        said.append("ops were not timed: the whole step taken as work, done K times")
    if verdict.largest_jobs is not None:
        said.append(
            f"the largest K: {profile.hardware.id}'s"
            f" {units.size(profile.hardware.memory_bytes or 0)} over one job's"
            f" {units.size(profile.memory.peak_bytes if profile.memory else 0)} peak"
        )
    return tuple(said)
