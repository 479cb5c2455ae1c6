"""Time a workload's training step: `time_workload` → `StepTiming`."""

from __future__ import annotations

import dataclasses

from lightspeed import progress
from lightspeed.facts.timing import StepTiming, WorkloadInfo
from lightspeed.measure.allocator import keep_freed_memory
from lightspeed.measure.noise import NoiseProbe
from lightspeed.measure.step import PreparedStep, StepSettings, guard, prepare
from lightspeed.measure.timer import TimerConfig, measure
from lightspeed.workload import Workload


def workload_info(
    workload: Workload,
    settings: StepSettings,
    parameter_count: int | None = None,
    parameter_tensors: int | None = None,
) -> WorkloadInfo:
    """The WorkloadInfo of `workload` run with `settings` (its parameter count, once
    the model is built)."""
    return WorkloadInfo(
        name=workload.name,
        batch_size=workload.batch_size,
        device=settings.device,
        precision=settings.precision,
        mixed=settings.mixed,
        parameter_count=parameter_count,
        tokens_per_sample=workload.tokens_per_sample,
        parameter_tensors=parameter_tensors,
        target=workload.target,
        jobs=workload.jobs,
    )


def prepared_info(prepared: PreparedStep) -> WorkloadInfo:
    """The WorkloadInfo of a prepared step."""
    return workload_info(
        prepared.workload,
        prepared.settings,
        prepared.parameter_count,
        prepared.parameter_tensors,
    )


def time_step(
    prepared: PreparedStep,
    config: TimerConfig | None = None,
    *,
    check_noise: bool = True,
    keep_memory: bool = True,
) -> StepTiming:
    """Time the training step of an already prepared workload; with `check_noise`, a
    noise check around the timing says whether the machine was quiet (`NoiseCheck`).
    With `keep_memory`, the C library's allocator keeps freed memory in the process
    from then on (`allocator.keep_freed_memory`), so the time does not depend on the
    heap's history."""
    kept = keep_freed_memory() if keep_memory else False
    with progress.stage("timing the step"):
        probe = NoiseProbe.start(prepared.settings.device) if check_noise else None
        with guard(prepared.workload, "the training step"):
            measurement = measure(prepared.step, sync=prepared.sync, config=config)
        noise = probe.finish() if probe is not None else None
    measurement = dataclasses.replace(measurement, noise=noise, freed_memory_kept=kept)
    return StepTiming(workload=prepared_info(prepared), measurement=measurement)


def time_workload(
    workload: Workload,
    settings: StepSettings | None = None,
    config: TimerConfig | None = None,
) -> StepTiming:
    """Build `workload` and time its training step (seconds per step, samples/s)."""
    with progress.stage("building the model"):
        prepared = prepare(workload, settings or StepSettings())
    return time_step(prepared, config)
