"""Calibration of the local CPU (a quick plan) and its per-machine cache."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import lightspeed.hardware.calibrate as calibrate_module
from lightspeed.dtypes import Precision
from lightspeed.errors import CalibrationError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import BANDWIDTH_KERNEL_ACCESSES, DeviceKind, Hardware
from lightspeed.hardware.bandwidth import (
    KERNELS,
    kernel_bandwidths,
    last_level_cache_bytes,
    parse_cache_size,
    working_sets_in_cache,
)
from lightspeed.hardware.cache import (
    CALIBRATION_SCHEMA_VERSION,
    calibration_path,
    load_calibration,
    machine_key,
    save_calibration,
)
from lightspeed.hardware.calibrate import CalibrationPlan, calibrate, default_plan
from lightspeed.hardware.compute_kernels import (
    COMPUTE_KERNELS,
    COMPUTE_KERNELS_BY_NAME,
    ComputeKernel,
)
from lightspeed.hardware.resolve import resolve_hardware
from lightspeed.measure.noise import canary_kernel
from lightspeed.measure.timer import TimerConfig

QUICK = CalibrationPlan(
    precisions=(Precision.FP32, Precision.FP64),
    matmul_sizes=(64, 128),
    per_size_budget_s=0.05,
    stream_array_bytes=8 * 2**20,
    stream_repeats=2,
    cache_working_sets=(512 * 2**10,),
    cache_budget_s=0.02,
)


def test_quick_calibration_measures_each_precision() -> None:
    hw = calibrate(Device.CPU, QUICK)
    assert hw.id == "local" and hw.kind is DeviceKind.CPU
    assert set(hw.peak_flops_per_s) == {Precision.FP32, Precision.FP64}
    cal = hw.calibration
    assert cal is not None
    assert set(cal.best_matmul_size.values()) <= {64, 128}
    assert cal.threads == torch.get_num_threads()
    assert cal.torch_version == torch.__version__
    assert set(cal.memory_kernel_bytes_per_s) == set(BANDWIDTH_KERNEL_ACCESSES)
    # Every ceiling is the fastest kernel of its set, and the calibration names it.
    assert hw.memory_bandwidth_bytes_per_s == max(cal.memory_kernel_bytes_per_s.values())
    for precision, rates in cal.compute_kernel_flops_per_s.items():
        assert set(rates) == {k.name for k in COMPUTE_KERNELS}
        assert (
            hw.peak(precision) == max(rates.values()) == rates[cal.best_compute_kernel[precision]]
        )
    # The cache roof covers the last-level cache.
    assert hw.cache_bytes == last_level_cache_bytes(Device.CPU)
    assert cal.cache_working_set_bytes == 512 * 2**10
    assert hw.cache_bandwidth_bytes_per_s == max(cal.cache_kernel_bytes_per_s.values())
    assert cal.canary_kernel == canary_kernel(Device.CPU)
    assert cal.canary_flops_per_s is not None and cal.canary_flops_per_s > 0


def test_no_cache_working_sets_means_no_cache_roof() -> None:
    plan = dataclasses.replace(QUICK, precisions=(Precision.FP32,), cache_working_sets=())
    hw = calibrate(Device.CPU, plan)
    assert hw.cache_bytes is None and hw.cache_bandwidth_bytes_per_s is None


def test_cache_working_sets_double_from_512_kib_to_half_the_cache() -> None:
    assert working_sets_in_cache(32 * 2**20) == tuple(2**k * 2**19 for k in range(6))
    # A cache smaller than 1 MiB still gets one working set: half of it.
    assert working_sets_in_cache(2**19) == (2**18,)


def test_a_busy_machine_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(calibrate_module, "load_average", lambda: 64.0)
    plan = dataclasses.replace(QUICK, precisions=(Precision.FP32,), cache_working_sets=())
    with caplog.at_level(logging.WARNING):
        hw = calibrate(Device.CPU, plan)
    assert "busy (load average 64.0)" in caplog.text
    assert hw.calibration is not None and hw.calibration.load_average == 64.0


def test_kernels_span_read_write_ratios_from_read_only_to_write_only() -> None:
    ratios = {k.name: (k.reads, k.writes) for k in KERNELS}
    # read sum(a); write a = 1; copy b = a; scale a *= -1; add a += b; triad a = b + 3c;
    # addcdiv a += -(b / c): each array read or written counted once.
    assert ratios == {
        "read": (1, 0),
        "write": (0, 1),
        "copy": (1, 1),
        "scale": (1, 1),
        "add": (2, 1),
        "triad": (2, 1),
        "addcdiv": (3, 1),
    }
    assert {k.ratio for k in KERNELS} == {"1:0", "0:1", "1:1", "2:1", "3:1"}


def test_kernels_compute_what_they_are_named_and_keep_values_finite() -> None:
    a, b, c = torch.full((4,), 1.0), torch.full((4,), 2.0), torch.full((4,), 0.5)
    runs = {k.name: k.run for k in KERNELS}
    runs["triad"](a, b, c)
    assert a.tolist() == [3.5] * 4  # 2 + 3 · 0.5
    runs["copy"](a, b, c)
    assert b.tolist() == [3.5] * 4
    runs["scale"](a, b, c)
    runs["scale"](a, b, c)
    assert a.tolist() == [3.5] * 4  # scaling by -1 twice is the identity: no denormals
    runs["add"](a, b, c)
    assert a.tolist() == [7.0] * 4
    assert float(runs["read"](a, b, c)) == 28.0
    runs["addcdiv"](a, b, c)
    assert a.tolist() == [0.0] * 4  # 7 − b / c, where the copy made b 3.5
    runs["write"](a, b, c)
    assert a.tolist() == [1.0] * 4


@pytest.mark.parametrize(
    "kernel", [k for k in COMPUTE_KERNELS if k.name != "sdpa"], ids=lambda k: k.name
)
def test_compute_kernels_count_the_flops_torch_counts(kernel: ComputeKernel) -> None:
    call, flops = kernel.build(64, torch.float32, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter:
        call()
    assert counter.get_total_flops() == flops


def test_the_attention_kernel_counts_the_flops_of_its_two_products() -> None:
    # torch's counter has no formula for the CPU's fused attention op, so count the
    # same attention written out: softmax(q·kᵀ/√d)·v on 4 × 8 heads of 32 tokens × 64.
    call, flops = COMPUTE_KERNELS_BY_NAME["sdpa"].build(64, torch.float32, torch.device("cpu"))
    q = k = v = torch.randn(4, 8, 32, 64)
    with FlopCounterMode(display=False) as counter:
        torch.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1) @ v
    assert counter.get_total_flops() == flops
    assert call().shape == (4, 8, 32, 64)


def test_compute_kernels_use_the_layouts_they_name() -> None:
    # The transposed operand is a view: the library sees a column-major operand.
    seen: list[tuple[bool, bool]] = []

    def record(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        seen.append((a.is_contiguous(), b.is_contiguous()))
        return out

    for name in ("mm-nn", "mm-nt", "mm-tn"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(torch, "mm", record)
            COMPUTE_KERNELS_BY_NAME[name].build(8, torch.float32, torch.device("cpu"))[0]()
    assert seen == [(True, True), (True, False), (False, True)]


def test_kernel_bandwidths_names_every_kernel() -> None:
    rates = kernel_bandwidths(
        Device.CPU, 1024, torch.float32, TimerConfig(warmup_steps=1, budget_s=0.01)
    )
    assert set(rates) == {k.name for k in KERNELS}


def test_default_plan_arrays_are_four_times_the_last_level_cache() -> None:
    plan = default_plan(Device.CPU)
    assert plan.stream_array_bytes >= 4 * last_level_cache_bytes(Device.CPU)


def test_a_gpu_plan_measures_no_cache_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    # On an H200 the kernels over L2-sized sets were launch-bound, slower than memory.
    from lightspeed.hardware import calibrate as module

    monkeypatch.setattr(module, "last_level_cache_bytes", lambda device: 60 * 2**20)
    gpu = default_plan(Device.CUDA)
    assert gpu.cache_working_sets == ()
    assert gpu.stream_array_bytes >= 4 * 60 * 2**20
    assert default_plan(Device.CPU).cache_working_sets


@pytest.mark.parametrize(
    ("text", "expected"), [("32768K", 32 * 2**20), ("1M\n", 2**20), ("512", 512)]
)
def test_parse_cache_size(text: str, expected: int) -> None:
    assert parse_cache_size(text) == expected


def test_cache_round_trip(calibrated_cpu: Hardware) -> None:
    assert load_calibration(Device.CPU) == calibrated_cpu
    assert resolve_hardware("local", Device.CPU) == calibrated_cpu
    assert resolve_hardware(None, Device.CPU) == calibrated_cpu  # the CPU default is local


def test_cache_is_keyed_by_thread_count() -> None:
    before = machine_key(Device.CPU)
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert machine_key(Device.CPU) != before
    finally:
        torch.set_num_threads(threads)


def test_corrupt_cache_is_ignored_with_a_warning(
    calibrated_cpu: Hardware, caplog: pytest.LogCaptureFixture
) -> None:
    path: Path = calibration_path(Device.CPU)
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert load_calibration(Device.CPU) is None
    assert "unreadable calibration cache" in caplog.text


def test_old_schema_is_ignored(calibrated_cpu: Hardware) -> None:
    path = calibration_path(Device.CPU)
    data = json.loads(path.read_text())
    data["schema_version"] = CALIBRATION_SCHEMA_VERSION - 1
    path.write_text(json.dumps(data))
    assert load_calibration(Device.CPU) is None


def test_save_writes_a_versioned_file(private_cache: Path, calibrated_cpu: Hardware) -> None:
    path = save_calibration(Device.CPU, calibrated_cpu)
    assert path.is_relative_to(private_cache)
    assert json.loads(path.read_text())["schema_version"] == CALIBRATION_SCHEMA_VERSION


def test_compute_kernels_past_the_budget_are_skipped_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = dataclasses.replace(
        QUICK, precisions=(Precision.FP32,), cache_working_sets=(), compute_budget_s=0.0
    )
    with (
        caplog.at_level(logging.WARNING),
        pytest.raises(CalibrationError, match="no matmul precision ran"),
    ):
        calibrate(Device.CPU, plan)
    assert "8 compute kernels skipped past the 0 s budget (fp32 mm-nn, fp32 mm-nt" in caplog.text
