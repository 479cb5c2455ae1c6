"""CUDA paths: device sync, GPU calibration, the local GPU's catalog entry. Skip without a GPU."""

from __future__ import annotations

import pytest
import torch

from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind
from lightspeed.hardware.calibrate import CalibrationPlan, calibrate, tf32_mode
from lightspeed.hardware.catalog import catalog_id_for_device_name
from lightspeed.hardware.resolve import local_catalog_gpu, resolve_hardware
from lightspeed.measure.device import synchronizer
from lightspeed.measure.step import StepSettings
from lightspeed.measure.timer import TimerConfig
from lightspeed.measure.workload_timing import time_workload
from lightspeed.suite import get

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_synchronizer_waits_for_the_gpu() -> None:
    assert synchronizer(Device.CUDA) is torch.cuda.synchronize


def test_tf32_mode_restores_the_setting() -> None:
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with pytest.raises(RuntimeError), tf32_mode(Device.CUDA, enabled=not before[0]):
        assert torch.backends.cuda.matmul.allow_tf32 is (not before[0])
        assert torch.backends.cudnn.allow_tf32 is (not before[0])
        raise RuntimeError("inside")
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


def test_gpu_calibration() -> None:
    plan = CalibrationPlan(
        precisions=(Precision.FP32, Precision.TF32, Precision.BF16),
        matmul_sizes=(1024, 2048),
        per_size_budget_s=0.1,
        stream_array_bytes=256 * 2**20,
        stream_repeats=3,
    )
    hw = calibrate(Device.CUDA, plan)
    assert hw.kind is DeviceKind.GPU
    assert hw.sm_count == torch.cuda.get_device_properties(0).multi_processor_count
    # Tensor-core bf16 beats plain fp32 on every GPU with bf16.
    assert hw.peak_flops_per_s[Precision.BF16] > hw.peak_flops_per_s[Precision.FP32]
    catalog_id = catalog_id_for_device_name(torch.cuda.get_device_name())
    if catalog_id is not None:
        datasheet = resolve_hardware(catalog_id, Device.CUDA)
        for precision, measured in hw.peak_flops_per_s.items():
            # A measurement never beats the datasheet peak by more than clock-boost noise.
            assert measured <= 1.05 * datasheet.peak(precision)
        assert hw.memory_bandwidth_bytes_per_s <= 1.05 * datasheet.memory_bandwidth_bytes_per_s


def test_default_hardware_on_cuda_is_the_catalog_entry() -> None:
    mapped = local_catalog_gpu()
    if mapped is None:
        pytest.skip(f"{torch.cuda.get_device_name()} is not in the catalog")
    assert resolve_hardware(None, Device.CUDA) == mapped
    assert mapped.memory_bytes == torch.cuda.get_device_properties(0).total_memory


def test_time_on_cuda() -> None:
    timing = time_workload(
        get("mlp"), StepSettings(device=Device.CUDA), TimerConfig(warmup_steps=3, budget_s=0.5)
    )
    assert timing.workload.device is Device.CUDA
    assert timing.measurement.n >= 5
    # GPU steps of this size take well under a second; a broken sync would read ~µs.
    assert 1e-5 < timing.measurement.median_s < 1.0
