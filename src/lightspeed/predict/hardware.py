"""A measured profile predicted on other hardware, op by op on the two rooflines.

Each op timed on the source is placed on the source's and the target's rooflines, with
its own precision and memory level on each (`analysis.step_roofline.analyse_op`), so an
op may cross the ridge between them. Then (Habitat's rule, per op, from the profile's
own figures instead of GPU counters):

- an op bound by compute or memory keeps its measured fraction of the speed of light:
  t' = t · SoL_target / SoL_source;
- an op bound by per-op overhead (`rules.op_bound`: small and under half its speed of
  light) keeps its measured time, the host's dispatch cost, which the device does not
  change; it never runs below its speed of light on the target;
- an op that computes and moves nothing, or was not timed, keeps its time, and so does
  the step's time outside captured ops (`Profile.unattributed_s`);
- the step time: the measured step × (Σ t' + outside) / (Σ t + outside).

Memory is the same tensors on either device, so it is kept; whether it fits the
target's memory is an assumption the prediction states. The workload's device becomes
the target's kind (a GPU's is `cuda`).
"""

from __future__ import annotations

import dataclasses

from lightspeed import units
from lightspeed.analysis.step_roofline import analyse_op
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind, Hardware
from lightspeed.facts.profile import Prediction, Profile
from lightspeed.facts.records import OpRecord
from lightspeed.predict.carry import scaled_step
from lightspeed.rules import Bound

RULES = (
    "each op timed on the source keeps its fraction of the speed of light on the target:"
    " time × SoL on the target / SoL on the source (each on its own roofline, with its own"
    " bound)",
    "ops bound by per-op overhead keep their measured time (the host's dispatch cost),"
    " never below their SoL on the target",
    "untimed ops, ops with no work and the time outside ops are kept",
    "step time: the measured step scaled by the profiled ops' time plus the time outside"
    " them, predicted over measured",
)


def carry_time(op: OpRecord, source: Hardware, target: Hardware) -> float:
    """Seconds `op`, measured on `source` (its `time_s`), takes on `target` (see the
    module's docstring); its measured time where it has none to carry. The one rule every
    cross-hardware prediction uses: a profile's ops, a trace's, a serving plan's."""
    measured = op.time_s
    if measured is None:
        return 0.0
    before = analyse_op(op, source)
    if before.point is None:
        return measured
    sol = analyse_op(op, target).sol_time_s
    if before.bound is Bound.OVERHEAD:
        return max(measured, sol)
    if before.sol_time_s > 0:
        return measured * (sol / before.sol_time_s)
    return measured


def on_hardware(profile: Profile, target: Hardware) -> Profile:
    """`profile` predicted on `target` (see the module's docstring)."""
    source = profile.hardware
    ops = tuple(
        op if op.time_s is None else dataclasses.replace(op, time_s=carry_time(op, source, target))
        for op in profile.ops
    )
    timing, profiled = scaled_step(profile, ops)
    device = Device.CUDA if target.kind is DeviceKind.GPU else Device.CPU
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
        ),
    )


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
