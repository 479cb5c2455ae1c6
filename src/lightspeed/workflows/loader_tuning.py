"""`tune_loader(workload)`: the DataLoader options that keep a training loop from
waiting for its data, found by measuring the loop under each.

The loader without workers comes first: its wait per step is the time to make one
batch in the step's own process (L), its step time the step alone (C). With w worker
processes on cores of their own, a batch is ready every L / w seconds, so the loop
runs at max(C, L / w) a step: that is each setting's prediction. Workers are doubled
(1, 2, 4, …) while the measured loop gets faster; at the best number, a deeper
prefetch is tried, and pinned memory where batches go to a GPU. The kept setting is the
fastest loop measured, whatever the prediction said: where the workers compete with the
step for the CPU's cores (a dataset that burns CPU on a small machine), more workers
slow the step down and the search stops at the best trade-off it measured.

Source: PyTorch's DataLoader documentation ("Single- and Multi-process Data Loading",
"Memory Pinning") and its performance tuning guide ("Enable async data loading and
augmentation"). `observe()` diagnoses the loop with the first setting and the kept one,
so the report says whether data loading still bounds it.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.tuning import LoaderOptions, LoaderRun, LoaderTuning
from lightspeed.measure.data_loading import batches, build_loader, queued, step_on, time_loader
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.workflows.observe import observe
from lightspeed.workload import Workload

__all__ = ["NOTHING_TO_GAIN", "tune_loader"]

# A loop that waits less than this share of its time for data has nothing to gain.
NOTHING_TO_GAIN = 0.05
# A setting must be this much faster than the best so far to go on adding workers:
# less is within what a shared machine drifts between two measurements.
BETTER = 1.03
# Steps observe() records to diagnose the loop.
DIAGNOSED_STEPS = 5
# Steps run before any is timed: the first ones pay for allocations and lazy state.
WARM_STEPS = 3
# Measured this much slower than predicted, the workers did not have cores of their own
# (passing batches between processes alone costs less).
CONTENDED = 1.5


def tune_loader(
    workload: Workload,
    settings: StepSettings | None = None,
    *,
    steps: int = 20,
    max_workers: int | None = None,
) -> LoaderTuning:
    """Every setting tried for `workload.loader`, `steps` steps each (see the module's
    docstring); `max_workers`: the most worker processes tried (default: twice the
    CPU's cores, at least 8, as workers that wait on files or sleep need no core)."""
    settings = settings or StepSettings()
    if workload.loader is None:
        raise ConfigError(
            f"workload {workload.name!r} has no data loader to tune: give the Workload a"
            " loader (loader=lambda batch_size, **options: DataLoader(dataset, batch_size,"
            " **options))."
        )
    cores = os.cpu_count() or 1
    most = max_workers if max_workers is not None else max(8, 2 * cores)
    if most < 0:
        raise ConfigError(f"max_workers {most} must be 0 or more.")
    prepared = prepare(workload, settings)
    for _ in range(WARM_STEPS):  # the step's first runs are slower than its own pace
        prepared.step()
    prepared.sync()
    threads = torch.get_num_threads()
    plain = time_loader(prepared, LoaderOptions(), steps=steps)
    runs = [plain]
    load_s, step_s = plain.wait_s, plain.compute_s
    note = ""
    if plain.wait_s < NOTHING_TO_GAIN * plain.loop_s:
        note = (
            f"the loop waits {plain.wait_s / plain.loop_s:.0%} of its time for data"
            " without workers: nothing to gain from them"
        )
    else:
        best, worse, workers = plain, 0, 1
        while workers <= most and worse < 2:
            tried = [
                time_loader(
                    prepared,
                    LoaderOptions(num_workers=workers, persistent_workers=True, prefetch_factor=2),
                    steps=steps,
                    threads=t,
                    predicted_loop_s=_predicted(load_s, step_s, workers),
                )
                for t in _thread_counts(threads, workers, cores, settings.device)
            ]
            runs += tried
            found = min(tried, key=lambda r: r.loop_s)
            if found.loop_s * BETTER < best.loop_s:
                best, worse = found, 0
            else:
                worse += 1
            if best.wait_s < NOTHING_TO_GAIN * best.loop_s:
                break
            workers *= 2
        runs += _refinements(prepared, best, steps, load_s, step_s, settings.device)
    chosen = min(range(len(runs)), key=lambda i: runs[i].loop_s)
    kept = runs[chosen]
    slow = [
        r
        for r in runs
        if r.predicted_loop_s is not None and r.loop_s > CONTENDED * r.predicted_loop_s
    ]
    if slow:
        worst = max(r.loop_s / (r.predicted_loop_s or r.loop_s) for r in slow)
        off = kept.loop_s / kept.predicted_loop_s if kept.predicted_loop_s else None
        note = (
            f"{len(slow)} of the settings with workers measured up to {worst:.1f}× slower"
            " than predicted with cores to spare"
            + (f" (the kept one {off:.1f}×)" if off is not None else "")
            + f": the workers compete with the step for the CPU's {cores} cores (or pay to"
            " pass their batches between processes); the fastest loop measured is kept"
        )
    before = _diagnosis(prepared, plain.options, plain.threads)
    after = before if chosen == 0 else _diagnosis(prepared, kept.options, kept.threads)
    return LoaderTuning(
        runs=tuple(runs),
        chosen=chosen,
        bound_before=before[0],
        bound_after=after[0],
        findings_before=before[1],
        findings_after=after[1],
        cpu_cores=cores,
        note=note,
    )


def _predicted(load_s: float, step_s: float, workers: int) -> float:
    """The loop's seconds a step with `workers` workers on cores of their own: a batch
    ready every `load_s / workers`, the step taking `step_s`."""
    return max(step_s, load_s / workers)


def _thread_counts(threads: int, workers: int, cores: int, device: Device) -> list[int]:
    """The step's CPU thread counts to try beside `workers` worker processes: as now,
    and, for a step on the CPU, as many as the cores the workers leave (at least 1)."""
    if device is not Device.CPU:
        return [threads]
    spare = max(1, min(threads, cores - workers))
    return [threads] if spare == threads else [threads, spare]


def _refinements(
    prepared: PreparedStep,
    best: LoaderRun,
    steps: int,
    load_s: float,
    step_s: float,
    device: Device,
) -> list[LoaderRun]:
    """At the best number of workers: a deeper prefetch, and pinned memory for a GPU."""
    workers = best.options.num_workers
    if workers == 0:
        return []
    predicted = _predicted(load_s, step_s, workers)
    deeper = dataclasses.replace(best.options, prefetch_factor=4)
    found = [
        time_loader(prepared, deeper, steps=steps, threads=best.threads, predicted_loop_s=predicted)
    ]
    if device is Device.CUDA:
        pinned = dataclasses.replace(
            min([best, *found], key=lambda r: r.loop_s).options, pin_memory=True
        )
        found.append(
            time_loader(
                prepared, pinned, steps=steps, threads=best.threads, predicted_loop_s=predicted
            )
        )
    return found


def _diagnosis(
    prepared: PreparedStep, options: LoaderOptions, threads: int
) -> tuple[str, tuple[str, ...]]:
    """The loop's bound and its findings' kinds, as `observe()` diagnoses its steps."""
    workload = prepared.workload
    before = torch.get_num_threads()
    loader = build_loader(workload, options)
    feed = batches(workload, loader)
    try:
        torch.set_num_threads(threads)
        # Past the batches queued while the workers started, as time_loader times.
        with observe(wait=1 + queued(options), warmup=1, active=DIAGNOSED_STEPS) as obs:
            for raw in obs.loop(feed):
                step_on(prepared, raw)
    finally:
        feed.close()
        del loader
        torch.set_num_threads(before)
    return obs.bound.value, tuple(f.kind.value for f in obs.findings)
