"""Measure the local device's ceilings: best sustained matmul FLOP/s per precision,
memory bandwidth (STREAM-style kernels over arrays ≥ 4× the last-level cache), and the
bandwidth of work that fits in the last-level cache (the same kernels on working sets
from 512 KiB to half the cache); `bandwidth` holds the kernels.

What a BLAS library reaches can sit far below the datasheet peak, so the usable
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
from lightspeed.measure.device import device_name, require, synchronizer, torch_dtype
from lightspeed.measure.timer import TimerConfig, measure

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CalibrationPlan:
    """What to measure: n×n×n matmuls at `matmul_sizes` for each of `precisions`, each
    size for `per_size_budget_s`; memory kernels on arrays of `stream_array_bytes` each,
    best of `stream_repeats`. A precision stops growing once one matmul takes longer
    than `per_size_budget_s`. Cache bandwidth: the kernels on each of
    `cache_working_sets` bytes, each timed for `cache_budget_s`; none when empty."""

    precisions: tuple[Precision, ...]
    matmul_sizes: tuple[int, ...]
    per_size_budget_s: float
    stream_array_bytes: int
    stream_repeats: int
    cache_working_sets: tuple[int, ...] = ()
    cache_budget_s: float = 0.1


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
            per_size_budget_s=0.3,
            stream_array_bytes=max(4 * llc, 512 * 2**20),
            stream_repeats=20,
            cache_working_sets=working_sets_in_cache(llc),
        )
    return CalibrationPlan(
        precisions=(Precision.FP64, Precision.FP32, Precision.BF16, Precision.FP16),
        matmul_sizes=(256, 512, 1024, 1536, 2048),
        per_size_budget_s=0.3,
        stream_array_bytes=max(4 * llc, 64 * 2**20),
        stream_repeats=10,
        cache_working_sets=working_sets_in_cache(llc),
    )


def calibrate(device: Device, plan: CalibrationPlan | None = None) -> Hardware:
    """Measure `device` and return it as a Hardware with id `local`."""
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
    peaks: dict[Precision, float] = {}
    best_sizes: dict[Precision, int] = {}
    for precision in plan.precisions:
        found = best_matmul(precision, device, plan)
        if found is not None:
            best_sizes[precision], peaks[precision] = found
    if not peaks:
        raise CalibrationError(f"no matmul precision ran on {device.value}; check the torch build.")
    memory_rates = memory_bandwidth(device, plan.stream_array_bytes, plan.stream_repeats)
    dram_bps = max(memory_rates.values())
    cache = cache_bandwidth(device, plan.cache_working_sets, plan.cache_budget_s)
    # A cache roof below the memory roof would say cached data is slower: keep the faster.
    cache_bps = None if cache is None else max(*cache[1].values(), dram_bps)
    duration = time.perf_counter() - started
    is_gpu = device is Device.CUDA
    props = torch.cuda.get_device_properties(torch_device) if is_gpu else None
    return Hardware(
        id="local",
        name=device_name(device),
        kind=DeviceKind.GPU if is_gpu else DeviceKind.CPU,
        peak_flops_per_s=peaks,
        memory_bandwidth_bytes_per_s=dram_bps,
        memory_bytes=props.total_memory if props else _physical_memory_bytes(),
        sm_count=props.multi_processor_count if props else None,
        cache_bytes=None if cache is None else last_level_cache_bytes(device),
        cache_bandwidth_bytes_per_s=cache_bps,
        sources={"*": "measured on this machine by `lightspeed hw calibrate`"},
        calibration=Calibration(
            method=(
                f"fastest n×n×n matmul replicate over n in {list(plan.matmul_sizes)};"
                f" copy, triad, scale and add in place on float64 arrays of"
                f" {plan.stream_array_bytes} B, fastest of {plan.stream_repeats}; cache: the"
                f" same kernels on float32 working sets of {list(plan.cache_working_sets)} B"
            ),
            library=math_library(device),
            threads=torch.get_num_threads(),
            torch_version=torch.__version__,
            measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            best_matmul_size=best_sizes,
            memory_kernel_bytes_per_s=memory_rates,
            stream_array_bytes=plan.stream_array_bytes,
            cache_kernel_bytes_per_s={} if cache is None else cache[1],
            cache_working_set_bytes=None if cache is None else cache[0],
            load_average=load,
            duration_s=duration,
        ),
    )


def best_matmul(
    precision: Precision, device: Device, plan: CalibrationPlan
) -> tuple[int, float] | None:
    """(size, FLOP/s) of the fastest matmul size for `precision`, or None if unsupported."""
    best: tuple[int, float] | None = None
    for n in plan.matmul_sizes:
        try:
            rate, one_call_s = matmul_rate(n, precision, device, plan.per_size_budget_s)
        except (RuntimeError, TypeError) as exc:
            log.info("%s matmul unsupported on %s: %s", precision.value, device.value, exc)
            return best
        log.debug("%s n=%d: %.3g FLOP/s", precision.value, n, rate)
        if best is None or rate > best[1]:
            best = (n, rate)
        if one_call_s > plan.per_size_budget_s:
            break
    return best


def matmul_rate(
    n: int, precision: Precision, device: Device, budget_s: float
) -> tuple[float, float]:
    """(FLOP/s, seconds per call) of an n×n×n matmul: 2·n³ FLOPs over the fastest replicate.

    The fastest replicate (each a block of ≥ 5 ms) is the best sustained rate: a
    ceiling has to bound what the library can reach, not describe a typical call.
    """
    torch_device = require(device)
    dtype = torch_dtype(precision)
    a = torch.randn(n, n, device=torch_device).to(dtype)
    b = torch.randn(n, n, device=torch_device).to(dtype)
    c = torch.empty(n, n, device=torch_device, dtype=dtype)
    with tf32_mode(device, enabled=precision is Precision.TF32):
        m = measure(
            lambda: torch.mm(a, b, out=c),
            sync=synchronizer(device),
            config=TimerConfig(warmup_steps=1, budget_s=budget_s, min_replicates=3),
        )
    return 2 * n**3 / m.min_s, m.median_s


@contextlib.contextmanager
def tf32_mode(device: Device, *, enabled: bool) -> Iterator[None]:
    """Allow or forbid TF32 tensor-core math for fp32 matmuls; restores the setting on exit."""
    if device is not Device.CUDA:
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def load_average() -> float | None:
    """The 1-minute load average of this machine, or None where the OS does not say."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy_load_average() -> float:
    """The load average above which other processes must be running on the cores torch
    uses: more runnable work than the cores it leaves free, plus one."""
    spare = max(0, (os.cpu_count() or 1) - torch.get_num_threads())
    return spare + 1.0


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
