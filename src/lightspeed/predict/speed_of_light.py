"""A step's time where nothing was measured: every op at its speed of light.

A shape-only profile (`measure.shape_only`) has every op's FLOPs and bytes and no time.
Placed on a device's roofline, each op takes at least its speed of light there; the sum
is the least time the step can take on that device — a bound, not an estimate: per-op
overhead and the efficiency real kernels reach are not known without a measurement.
"""

from __future__ import annotations

import dataclasses

from lightspeed.analysis.step_roofline import analyse_ops
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind
from lightspeed.facts.profile import Prediction, Profile
from lightspeed.facts.timing import Measurement

RULES = (
    "ops, FLOPs, bytes and memory: the step run on fake tensors (exact, nothing executed)",
    "each op at its speed of light on the hardware: the step cannot run faster; per-op"
    " overhead and the efficiency kernels reach are not modelled",
)


def at_speed_of_light(profile: Profile) -> Profile:
    """`profile` (a shape-only one) with every op timed at its speed of light on its
    hardware, and the step at their sum, in seconds."""
    ops = tuple(dataclasses.replace(a.op, time_s=a.sol_time_s) for a in analyse_ops(profile))
    step = sum(op.time_s or 0.0 for op in ops)
    assumptions = []
    if profile.hardware.kind is DeviceKind.GPU and profile.workload.device is Device.CPU:
        assumptions.append(
            "the ops are those the step decomposes into on a CPU (a GPU may fuse some, or"
            " pick other attention kernels)"
        )
    return dataclasses.replace(
        profile,
        ops=ops,
        timing=Measurement(times_s=(step,), steps_per_replicate=1, warmup_steps=0),
        profiled_step_s=step,
        unattributed_s=0.0,
        prediction=Prediction(
            changes={"shape-only": ""},
            source_hardware=profile.hardware.id,
            measured_step_time_s=None,
            rules=RULES,
            assumptions=tuple(assumptions),
        ),
    )
