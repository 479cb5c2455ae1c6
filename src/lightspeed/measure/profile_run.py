"""Run a workload through every measurement and assemble its `Profile`.

Order: build and time the step (the timer's warm-up also creates optimizer state),
capture its ops, time them in a profiled run, then measure memory. Each stage runs a
fresh step of the same prepared workload; none of them runs inside another, so the
step time comes from an uninstrumented run.
"""

from __future__ import annotations

import dataclasses
import logging

from lightspeed import progress
from lightspeed.errors import LightspeedError, ProfileIncomplete
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import OpTimeSource, Profile
from lightspeed.measure.capture import capture_step, without_mode_artifacts
from lightspeed.measure.memory import measure_memory
from lightspeed.measure.op_times import profile_op_times
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.measure.timer import TimerConfig
from lightspeed.measure.workload_timing import prepared_info, time_step, workload_info
from lightspeed.workload import Workload

log = logging.getLogger(__name__)


def profile_workload(
    workload: Workload,
    hardware: Hardware,
    settings: StepSettings | None = None,
    *,
    timer: TimerConfig | None = None,
    profiled_steps: int = 3,
    with_memory: bool = True,
) -> Profile:
    """Measure one training step of `workload` and place it on `hardware`.

    Raises ProfileIncomplete, carrying the partial Profile, when the workload fails
    part-way (it raises, or runs out of memory).
    """
    settings = settings or StepSettings()
    profile = Profile(workload=workload_info(workload, settings), hardware=hardware, timing=None)
    try:
        with progress.stage("building the model"):
            prepared = prepare(workload, settings)
        profile = dataclasses.replace(profile, workload=prepared_info(prepared))
        timing = time_step(prepared, timer)
        profile = dataclasses.replace(profile, timing=timing.measurement)
        with progress.stage("capturing the step's ops"):
            ops = capture_step(prepared)
        profile = dataclasses.replace(profile, ops=tuple(ops))
        with progress.stage(f"timing each op over {profiled_steps} profiled steps"):
            times = profile_op_times(prepared, [op.name for op in ops], steps=profiled_steps)
        timed_ops = tuple(
            without_mode_artifacts(
                [
                    dataclasses.replace(op, time_s=t)
                    for op, t in zip(ops, times.times_s, strict=True)
                ]
            )
        )
        source = OpTimeSource.CUDA_KERNELS if times.device_time else OpTimeSource.CPU
        profile = dataclasses.replace(
            profile,
            ops=timed_ops,
            op_time_source=source,
            profiled_step_s=times.profiled_step_s,
            unattributed_s=times.unattributed_s,
        )
        if with_memory:
            with progress.stage("replaying the step's memory"):
                memory = measure_memory(prepared)
            profile = dataclasses.replace(profile, memory=memory)
    except LightspeedError as exc:
        partial = dataclasses.replace(profile, failure=str(exc))
        raise ProfileIncomplete(str(exc), partial) from exc
    return profile
