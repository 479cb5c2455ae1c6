"""Inference latency by batch size (ℓ(b), the latency profile Nexus schedules by): the
workload's forward under `torch.inference_mode()`, no loss, labels or optimizer.

For each batch size the model (built once, in eval mode) runs on a batch as the
workload makes it: warmed up until its latency stops falling (`timer.has_settled`, at
most `timer.default_max_settle_s`), then every call timed alone between device
synchronisations until the budget is spent — a request's latency is one call's, so
calls are never averaged in blocks, and the tail (p99) is a call that happened. The
forward's ops are captured once per batch size (FLOPs, bytes) and placed on the
hardware's roofline: its speed of light. Peak memory comes from the CUDA allocator;
on a CPU it is not measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lightspeed import progress
from lightspeed.analysis.step_roofline import analyse_op
from lightspeed.dtypes import StepDtype
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind, Hardware
from lightspeed.facts.profile import Profile
from lightspeed.facts.serving import BatchLatency, LatencyForecast, LatencyProfile
from lightspeed.measure.capture import capturing
from lightspeed.measure.device import require, synchronizer, torch_dtype
from lightspeed.measure.step import StepSettings, guard, to_device
from lightspeed.measure.timer import TimerConfig, default_max_settle_s, has_settled
from lightspeed.workflows.profile import PROFILE_MIN_REPLICATES
from lightspeed.workload import Workload
from lightspeed.workload.inference import forward_of, inference_step

WARMUP_CALLS = 3
MIN_CALLS = 20


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """`--batch-sizes 1,2,4`: distinct batch sizes of at least 1, in the order given."""
    sizes: list[int] = []
    for part in text.split(","):
        try:
            size = int(part.strip())
        except ValueError:
            raise ConfigError(
                f"--batch-sizes {text!r}: {part.strip()!r} is not a whole number; give"
                " comma-separated batch sizes, e.g. 1,2,4,8."
            ) from None
        if size < 1:
            raise ConfigError(f"--batch-sizes {text!r}: a batch size must be at least 1.")
        if size not in sizes:
            sizes.append(size)
    return tuple(sizes)


def latency_by_batch(
    workload: Workload,
    batch_sizes: Sequence[int],
    *,
    hardware: Hardware,
    device: Device = Device.CPU,
    dtype: StepDtype = StepDtype.FP32,
    budget_s: float = 1.0,
    clock: Callable[[], float] = time.perf_counter,
    model: torch.nn.Module | None = None,
) -> LatencyProfile:
    """`workload`'s inference latency at each of `batch_sizes` (see the module's
    docstring), spending about `budget_s` seconds timing each, on `device` in `dtype`
    (autocast for a mixed one, the model and batch cast for a pure one), placed on
    `hardware`'s roofline. `model`: the workload's model already built, on the device
    in the stored dtype and in eval mode (None: built here)."""
    if not batch_sizes:
        raise ConfigError("--batch-sizes: give at least one batch size.")
    if not budget_s > 0:
        raise ConfigError(f"--budget {budget_s} must be a positive number of seconds.")
    target = require(device)
    stored = torch_dtype(dtype.stored)
    if model is None:
        with guard(workload, "building the model"):
            model = workload.model().to(device=target, dtype=stored).eval()
    forward = forward_of(workload)
    sync = synchronizer(device)
    batches = []
    for size in batch_sizes:
        with guard(workload.with_batch_size(size), "making the batch"):
            batch = to_device(workload.batch(size), target, stored)

        def call(batch: Any = batch, counted: bool = False) -> None:
            # The capture watches under no_grad: under inference_mode the dispatch sees
            # composite ops (conv2d, batch_norm) that no FLOP formula counts.
            mode = torch.no_grad() if counted else torch.inference_mode()
            with mode, _autocast(dtype, target):
                forward(model, batch)

        with guard(workload.with_batch_size(size), "the forward"):
            batches.append(_one_batch(size, call, model, sync, hardware, device, budget_s, clock))
    return LatencyProfile(
        name=workload.name,
        target=workload.target,
        device=device.value,
        hardware_id=hardware.id,
        threads=torch.get_num_threads(),
        batches=tuple(batches),
    )


def _autocast(dtype: StepDtype, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if not dtype.mixed:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch_dtype(dtype.precision))


def _one_batch(
    size: int,
    call: Callable[..., None],
    model: torch.nn.Module,
    sync: Callable[[], None],
    hardware: Hardware,
    device: Device,
    budget_s: float,
    clock: Callable[[], float],
) -> BatchLatency:
    with capturing(model) as capture:
        call(counted=True)
    ops = capture.records
    sol = sum(analyse_op(op, hardware).sol_time_s for op in ops)
    if device is Device.CUDA:
        torch.cuda.reset_peak_memory_stats()

    def timed() -> float:
        sync()
        start = clock()
        call()
        sync()
        return clock() - start

    warmup = [timed() for _ in range(WARMUP_CALLS)]
    settle_until = clock() + default_max_settle_s()
    while not has_settled(warmup, 0.05) and clock() < settle_until:
        warmup.append(timed())
    latencies: list[float] = []
    deadline = clock() + budget_s
    while len(latencies) < MIN_CALLS or clock() < deadline:
        latencies.append(timed())
    peak = torch.cuda.max_memory_allocated() if device is Device.CUDA else None
    return BatchLatency(
        batch_size=size,
        latencies_s=tuple(latencies),
        flops=sum(op.flops for op in ops),
        bytes=sum(op.bytes for op in ops),
        sol_time_s=sol,
        peak_memory_bytes=peak,
    )


# Seconds spent timing each batch size's forward as a step, before its ops are profiled.
FORECAST_BUDGET_S = 0.5


def check_forecastable(settings: StepSettings, autocast: str | None) -> None:
    """Refuse, before anything is timed, an autocast forecast (`--predict-dtype`) of a
    forward that does not run in fp32."""
    if autocast is not None and settings.dtype is not StepDtype.FP32:
        raise ConfigError(
            f"--predict-dtype {autocast} predicts the fp32 forward under autocast; this one"
            f" runs in {settings.dtype.value}: time it with --dtype fp32, or measure --dtype"
            f" {autocast} itself."
        )


def forecast_latency(
    workload: Workload,
    measured: LatencyProfile,
    *,
    hardware: Hardware,
    settings: StepSettings,
    target: Hardware | None = None,
    autocast: str | None = None,
    budget_s: float = FORECAST_BUDGET_S,
) -> LatencyForecast:
    """`measured` (ℓ(b) of `workload` on `hardware`, run with `settings`) predicted on
    `target` hardware and/or under `autocast` ("bf16", "fp16") by the what-ifs a training
    step gets (`predict.predict`): each batch size's forward is profiled op by op as a
    step (`inference_step`, about `budget_s` seconds timing it), predicted, and its
    measured calls scaled by the predicted time over the measured one. The spread of the
    calls is assumed to scale with their median."""
    from lightspeed.measure.profile_run import profile_workload
    from lightspeed.predict.whatif import predict

    if target is None and autocast is None:
        raise ConfigError("a latency forecast needs other hardware or an autocast precision.")
    check_forecastable(settings, autocast)
    inference = inference_step(workload)
    timer = TimerConfig(budget_s=budget_s, min_replicates=PROFILE_MIN_REPLICATES)
    scales: list[float] = []
    batches: list[BatchLatency] = []
    predicted: Profile | None = None
    for b in measured.batches:
        at = inference.with_batch_size(b.batch_size)
        with progress.stage(f"predicting batch {b.batch_size}"):
            profiled = profile_workload(at, hardware, settings, timer=timer)
            predicted = predict(profiled, workload=at, dtype=autocast, hardware=target)
        was, now = profiled.step_time_s, predicted.step_time_s
        if was is None or now is None or not was > 0:
            raise ConfigError(
                f"batch {b.batch_size}: the forward could not be timed as a step to predict"
                " from; run `lightspeed profile` on the workload to see why."
            )
        scale = now / was
        scales.append(scale)
        on = predicted.hardware
        batches.append(
            BatchLatency(
                batch_size=b.batch_size,
                latencies_s=tuple(t * scale for t in b.latencies_s),
                flops=sum(op.flops for op in predicted.ops),
                bytes=sum(op.bytes for op in predicted.ops),
                sol_time_s=sum(analyse_op(op, on).sol_time_s for op in predicted.ops),
                peak_memory_bytes=None if predicted.memory is None else predicted.memory.peak_bytes,
            )
        )
    assert predicted is not None and predicted.prediction is not None
    device = Device.CUDA if predicted.hardware.kind is DeviceKind.GPU else Device.CPU
    latency = dataclasses.replace(
        measured,
        device=device.value,
        hardware_id=predicted.hardware.id,
        batches=tuple(batches),
        predicted_from=measured.hardware_id,
    )
    return LatencyForecast(latency=latency, scales=tuple(scales), prediction=predicted.prediction)
