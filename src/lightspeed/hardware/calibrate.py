"""Measure the local device's ceilings, an empirical roofline: each precision's peak is
the fastest of the compute kernels (`compute_kernels`: matmul layouts, batched products,
convolutions) over a sweep of sizes; memory bandwidth the fastest of the bandwidth
kernels (`bandwidth`: read:write ratios from read-only to write-only) on arrays ≥ 4×
the last-level cache; cache bandwidth the same kernels on working sets from 512 KiB to
half the cache. Every kernel's figure is kept, so a report can say which set a roof.

What a math library reaches can sit far below the datasheet peak, so the usable
ceiling of a CPU is the one measured here, with the library the workload uses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import re
import time
from collections.abc import Iterator

import torch

from lightspeed import progress
from lightspeed.dtypes import Precision
from lightspeed.errors import CalibrationError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Calibration, DeviceKind, Hardware
from lightspeed.hardware.bandwidth import (
    cache_bandwidth,
    last_level_cache_bytes,
    memory_bandwidth,
    working_sets_in_cache,
)
from lightspeed.hardware.compute_kernels import COMPUTE_KERNELS, ComputeKernel
from lightspeed.measure.device import device_name, require, synchronizer, torch_dtype
from lightspeed.measure.noise import NoiseProbe, busy_load_average, canary_kernel, load_average
from lightspeed.measure.timer import TimerConfig, measure

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CalibrationPlan:
    """What to measure: each of `compute_kernels` (names in `compute_kernels`) at sizes
    `matmul_sizes` for each of `precisions`, each size for `per_size_budget_s`; memory
    kernels on arrays of `stream_array_bytes` each, best of `stream_repeats`. A kernel
    stops growing once its next size would take longer than `per_size_budget_s` a call.
    Cache bandwidth: the kernels on each of `cache_working_sets` bytes, each timed for
    `cache_budget_s`; none when empty. Compute kernels not started within
    `compute_budget_s` of the start are skipped (and named in a warning), so a machine
    far slower than planned for still calibrates in bounded time."""

    precisions: tuple[Precision, ...]
    matmul_sizes: tuple[int, ...]
    per_size_budget_s: float
    stream_array_bytes: int
    stream_repeats: int
    cache_working_sets: tuple[int, ...] = ()
    cache_budget_s: float = 0.1
    compute_kernels: tuple[str, ...] = tuple(k.name for k in COMPUTE_KERNELS)
    compute_budget_s: float = 45.0


def default_plan(device: Device) -> CalibrationPlan:
    """The plan `lightspeed hw calibrate` uses: under a minute on a 2-core CPU."""
    llc = last_level_cache_bytes(device)
    if device is Device.CUDA:
        return CalibrationPlan(
            precisions=(
                Precision.FP64,
                Precision.FP32,
                Precision.TF32,
                Precision.BF16,
                Precision.FP16,
            ),
            matmul_sizes=(1024, 2048, 4096, 8192),
            per_size_budget_s=0.2,
            stream_array_bytes=max(4 * llc, 512 * 2**20),
            stream_repeats=20,
            # No cache tier: at L2 sizes each of these kernels is over in a few µs and
            # its launch sets the rate (an H200's "L2" read 3.25 TB/s against 4.54 TB/s
            # from memory). A GPU's ops get the memory roof alone, as catalog GPUs do.
            cache_working_sets=(),
        )
    return CalibrationPlan(
        precisions=(Precision.FP64, Precision.FP32, Precision.BF16, Precision.FP16),
        matmul_sizes=(256, 512, 1024, 2048),
        per_size_budget_s=0.15,
        stream_array_bytes=max(4 * llc, 64 * 2**20),
        stream_repeats=10,
        cache_working_sets=working_sets_in_cache(llc),
    )


@dataclasses.dataclass(frozen=True)
class KernelPeak:
    """A compute kernel's best rate: `flops_per_s` at size `size`."""

    kernel: str
    size: int
    flops_per_s: float


def calibrate(device: Device, plan: CalibrationPlan | None = None) -> Hardware:
    """Measure `device` and return it as a Hardware with id `local`.

    Nothing here judges the figures: `plausibility.problems` does, before a
    calibration is cached.
    """
    torch_device = require(device)
    plan = plan or default_plan(device)
    load = load_average()
    if load is not None and load > busy_load_average():
        log.warning(
            "the machine is busy (load average %.1f): measured ceilings will be low and"
            " profiles may then read above 100%% of the speed of light; calibrate again"
            " with `lightspeed hw calibrate` when it is quiet",
            load,
        )
    started = time.perf_counter()
    probe = NoiseProbe.start(device)
    kernels = [k for k in COMPUTE_KERNELS if k.name in plan.compute_kernels]
    peaks: dict[Precision, dict[str, KernelPeak]] = {}
    skipped: list[str] = []
    for precision in plan.precisions:
        found = {}
        for kernel in kernels:
            if time.perf_counter() - started > plan.compute_budget_s:
                skipped.append(f"{precision.value} {kernel.name}")
                continue
            with progress.stage(f"{precision.value} {kernel.name}"):
                peak = kernel_peak(kernel, precision, device, plan)
            if peak is not None:
                found[kernel.name] = peak
        if found:
            peaks[precision] = found
    if skipped:
        log.warning(
            "calibration: %d compute kernels skipped past the %.0f s budget (%s); their"
            " layouts may run above the measured peaks",
            len(skipped),
            plan.compute_budget_s,
            ", ".join(skipped),
        )
    if not peaks:
        raise CalibrationError(f"no matmul precision ran on {device.value}; check the torch build.")
    best = {p: max(found.values(), key=lambda k: k.flops_per_s) for p, found in peaks.items()}
    with progress.stage("memory bandwidth"):
        memory_rates = memory_bandwidth(device, plan.stream_array_bytes, plan.stream_repeats)
    with progress.stage("cache bandwidth"):
        cache = cache_bandwidth(device, plan.cache_working_sets, plan.cache_budget_s)
    noise = probe.finish()
    for warning in noise.warnings:
        log.warning("calibration: %s", warning)
    duration = time.perf_counter() - started
    is_gpu = device is Device.CUDA
    props = torch.cuda.get_device_properties(torch_device) if is_gpu else None
    kernel_names = ", ".join(k.name for k in kernels)
    return Hardware(
        id="local",
        name=device_name(device),
        kind=DeviceKind.GPU if is_gpu else DeviceKind.CPU,
        peak_flops_per_s={p: k.flops_per_s for p, k in best.items()},
        memory_bandwidth_bytes_per_s=max(memory_rates.values()),
        memory_bytes=props.total_memory if props else _physical_memory_bytes(),
        sm_count=props.multi_processor_count if props else None,
        cache_bytes=None if cache is None else last_level_cache_bytes(device),
        cache_bandwidth_bytes_per_s=None if cache is None else max(cache[1].values()),
        sources={"*": "measured on this machine by `lightspeed hw calibrate`"},
        calibration=Calibration(
            method=(
                f"fastest of the compute kernels {kernel_names} over n in"
                f" {list(plan.matmul_sizes)}; fastest of the bandwidth kernels read, write,"
                f" copy, scale, add, triad and addcdiv on float64 arrays of"
                f" {plan.stream_array_bytes} B, best of {plan.stream_repeats} replicates;"
                f" cache: the same kernels on float32 working sets of"
                f" {list(plan.cache_working_sets)} B"
            ),
            library=math_library(device),
            threads=torch.get_num_threads(),
            torch_version=torch.__version__,
            measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            best_matmul_size={p: k.size for p, k in best.items()},
            best_compute_kernel={p: k.kernel for p, k in best.items()},
            compute_kernel_flops_per_s={
                p: {name: k.flops_per_s for name, k in found.items()} for p, found in peaks.items()
            },
            memory_kernel_bytes_per_s=memory_rates,
            stream_array_bytes=plan.stream_array_bytes,
            cache_kernel_bytes_per_s={} if cache is None else cache[1],
            cache_working_set_bytes=None if cache is None else cache[0],
            load_average=load,
            duration_s=duration,
            canary_kernel=canary_kernel(device),
            canary_flops_per_s=noise.canary_after_per_s,
            canary_before_flops_per_s=noise.canary_before_per_s,
        ),
    )


def kernel_peak(
    kernel: ComputeKernel, precision: Precision, device: Device, plan: CalibrationPlan
) -> KernelPeak | None:
    """The best rate of `kernel` in `precision` over the plan's sizes, or None when the
    library has no such kernel for that precision."""
    best: KernelPeak | None = None
    sizes = plan.matmul_sizes
    for i, n in enumerate(sizes):
        try:
            rate, one_call_s = kernel_rate(kernel, n, precision, device, plan.per_size_budget_s)
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            log.info("%s %s unsupported on %s: %s", precision.value, kernel.name, device.value, exc)
            return best
        log.debug("%s %s n=%d: %.3g FLOP/s", precision.value, kernel.name, n, rate)
        if best is None or rate > best.flops_per_s:
            best = KernelPeak(kernel.name, n, rate)
        # Work grows as n³: stop before a size whose single call would outlast the budget
        # (a slow layout at n = 2048 can take seconds a call).
        if i + 1 < len(sizes) and one_call_s * (sizes[i + 1] / n) ** 3 > plan.per_size_budget_s:
            break
    return best


def kernel_rate(
    kernel: ComputeKernel, n: int, precision: Precision, device: Device, budget_s: float
) -> tuple[float, float]:
    """(FLOP/s, median seconds per call) of `kernel` at size `n` in `precision`.

    The rate is over the fastest replicate (each a block of ≥ 5 ms): a ceiling has to
    bound what the library can reach, not describe a typical call.
    """
    torch_device = require(device)
    call, flops = kernel.build(n, torch_dtype(precision), torch_device)
    with tf32_mode(device, enabled=precision is Precision.TF32):
        m = measure(
            call,
            sync=synchronizer(device),
            config=TimerConfig(warmup_steps=1, budget_s=budget_s, min_replicates=3, max_settle_s=0),
        )
    return flops / m.min_s, m.median_s


@contextlib.contextmanager
def tf32_mode(device: Device, *, enabled: bool) -> Iterator[None]:
    """Allow or forbid TF32 tensor-core math for fp32 matmuls and convolutions; restores
    the settings on exit. cuDNN allows TF32 by default, so without forbidding it an fp32
    convolution would be timed on tensor cores and raise the fp32 ceiling past its
    datasheet peak (3× on an H200)."""
    if device is not Device.CUDA:
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def math_library(device: Device) -> str:
    """The library torch's matmuls run on for `device` (BLAS on CPU, cuBLAS on CUDA)."""
    if device is Device.CUDA:
        return f"cuBLAS (CUDA {torch.version.cuda})"
    match = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    blas = match.group(1) if match else "unknown BLAS"
    onednn = " + oneDNN" if torch.backends.mkldnn.is_available() else ""
    return f"{blas}{onednn}"


def _physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
