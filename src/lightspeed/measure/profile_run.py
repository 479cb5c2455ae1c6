"""Run a workload through every measurement and assemble its `Profile`.

Order: build and time the step (the timer's warm-up also creates optimizer state), then
one step watched by both the op capture and the memory measurement (neither allocates
what the step holds), then profiled steps that time each captured op. Each stage runs
fresh steps of the same prepared workload, so the step time comes from uninstrumented
steps and the op times from steps no dispatch mode slows.
A profile costs a few steps beyond the timer's warm-up: the timer's replicates, the
watched step and the profiled steps, as many as fit in `PROFILED_BUDGET_S` of step
time, between 1 and `MAX_PROFILED_STEPS`, unless asked for.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from lightspeed import progress
from lightspeed.errors import LightspeedError, ProfileIncomplete
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import OpTimeSource, Profile
from lightspeed.measure.capture import capturing, without_mode_artifacts
from lightspeed.measure.memory import measure_memory
from lightspeed.measure.op_times import at_timed_step, profile_op_times
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.measure.timer import TimerConfig
from lightspeed.measure.workload_timing import prepared_info, time_step, workload_info
from lightspeed.workload import Workload

log = logging.getLogger(__name__)

# Profiled steps: each op's time is their median. Three give a steady median when a step
# is short; a long step's ops are long enough to time once.
MAX_PROFILED_STEPS = 3
PROFILED_BUDGET_S = 2.0
# The profiler's set-up cost (hundreds of µs) lands on the first ops after it starts: a
# step shorter than this gets an unread step first to absorb it.
ABSORB_BELOW_S = 0.1


def profiled_steps_for(step_s: float) -> int:
    """How many profiled steps of `step_s` seconds fit the profiled budget (1 to 3)."""
    fit = int(PROFILED_BUDGET_S / step_s) if step_s > 0 else MAX_PROFILED_STEPS
    return max(1, min(MAX_PROFILED_STEPS, fit))


def profile_workload(
    workload: Workload,
    hardware: Hardware,
    settings: StepSettings | None = None,
    *,
    timer: TimerConfig | None = None,
    profiled_steps: int | None = None,
    with_memory: bool = True,
) -> Profile:
    """Build `workload` and measure one training step of it on `hardware`
    (`profile_prepared`).

    Raises ProfileIncomplete, carrying the partial Profile, when the workload fails
    part-way (it raises, or runs out of memory).
    """
    settings = settings or StepSettings()
    try:
        with progress.stage("building the model"):
            prepared = prepare(workload, settings)
    except LightspeedError as exc:
        info = workload_info(workload, settings)
        partial = Profile(
            workload=info,
            hardware=hardware,
            timing=None,
            failure=str(exc),
            torch_version=torch.__version__,
        )
        raise ProfileIncomplete(str(exc), partial) from exc
    return profile_prepared(
        prepared, hardware, timer=timer, profiled_steps=profiled_steps, with_memory=with_memory
    )


def profile_prepared(
    prepared: PreparedStep,
    hardware: Hardware,
    *,
    timer: TimerConfig | None = None,
    profiled_steps: int | None = None,
    with_memory: bool = True,
) -> Profile:
    """Measure one training step of a built workload and place it on `hardware`.

    `profiled_steps` (None: `profiled_steps_for` the step time) time each op. The
    step stays usable afterwards (a bench times it again).

    Raises ProfileIncomplete, carrying the partial Profile, when the workload fails
    part-way (it raises, or runs out of memory).
    """
    info = prepared_info(prepared)
    profile = Profile(
        workload=info,
        hardware=hardware,
        timing=None,
        torch_version=torch.__version__,
        # Whether cuDNN picks each convolution's fastest algorithm by timing them.
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark)
        if info.device is Device.CUDA
        else None,
    )
    try:
        timing = time_step(prepared, timer)
        profile = dataclasses.replace(profile, timing=timing.measurement)
        # Memory is measured in the capture's step: one instrumented step, not two.
        watched = "ops and memory" if with_memory else "ops"
        with progress.stage(f"capturing the step's {watched}"), capturing(prepared) as capture:
            if with_memory:
                memory = measure_memory(prepared, capture.entering)
            else:
                memory = None
                prepared.step(capture.entering)
        ops = without_mode_artifacts(capture.records)
        profile = dataclasses.replace(profile, ops=tuple(ops), memory=memory)
        steps = profiled_steps or profiled_steps_for(timing.measurement.median_s)
        with progress.stage(f"timing each op over {steps} profiled step{'s' * (steps > 1)}"):
            times = profile_op_times(
                prepared,
                [op.name for op in ops],
                steps=steps,
                absorb=timing.measurement.median_s < ABSORB_BELOW_S,
            )
        times = at_timed_step(times, timing.measurement.median_s)
        timed_ops = tuple(
            dataclasses.replace(op, time_s=t) for op, t in zip(ops, times.times_s, strict=True)
        )
        source = OpTimeSource.CUDA_KERNELS if times.device_time else OpTimeSource.CPU
        profile = dataclasses.replace(
            profile,
            ops=timed_ops,
            op_time_source=source,
            profiled_step_s=times.profiled_step_s,
            unattributed_s=times.unattributed_s,
        )
    except LightspeedError as exc:
        partial = dataclasses.replace(profile, failure=str(exc))
        raise ProfileIncomplete(str(exc), partial) from exc
    return profile
