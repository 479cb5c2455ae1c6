"""CUDA paths: device sync, GPU calibration, the local GPU's catalog entry. Skip without a GPU."""

from __future__ import annotations

import pytest
import torch

import lightspeed
from factories import rnn_tagger_workload
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind
from lightspeed.hardware.calibrate import CalibrationPlan, calibrate, tf32_mode
from lightspeed.hardware.catalog import catalog_id_for_device_name
from lightspeed.hardware.resolve import local_catalog_gpu, resolve_hardware
from lightspeed.measure.device import synchronizer
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.measure.timer import TimerConfig
from lightspeed.measure.workload_timing import time_workload
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.predict.scan import scan_levels
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


def test_shape_only_on_cuda_sees_a_checkpoints_lower_peak() -> None:
    # Fake parameters are made on the GPU (a fake module cannot be moved there), and a
    # step on fake tensors allocates nothing, so its peak is the tracked one.
    encoder = get("transformer-encoder").with_batch_size(8)
    settings = StepSettings(device=Device.CUDA)
    hw = resolve_hardware(None, Device.CUDA)
    plain = profile_shape_only(encoder, hw, settings)
    layers = ["encoder.layers.0", "encoder.layers.1"]
    checkpointed = profile_shape_only(checkpoint(encoder, layers), hw, settings)
    assert plain.memory is not None and checkpointed.memory is not None
    assert plain.memory.method == "tracked-storages"
    assert checkpointed.memory.activations_bytes < plain.memory.activations_bytes
    assert checkpointed.memory.peak_bytes < plain.memory.peak_bytes


def test_ops_with_products_recomputed_on_cuda() -> None:
    """On the GPU, a block's products (cuBLAS's, the fused attention) are found on fake
    tensors of the GPU: each kind more recomputed keeps less, and a real step's
    gradients are the plain step's."""
    encoder = get("transformer-encoder-tiny")
    settings = StepSettings(device=Device.CUDA)
    hw = resolve_hardware(None, Device.CUDA)
    kept = []
    for spec in ("ops", "ops+1", "ops+2"):
        memory = profile_shape_only(checkpoint(encoder, spec), hw, settings).memory
        assert memory is not None
        kept.append(memory.activations_bytes)
    assert kept[0] > kept[1] > kept[2]
    steps = []
    for workload in (encoder, checkpoint(encoder, "ops+2")):
        torch.manual_seed(0)
        prepared = prepare(workload, settings)
        torch.manual_seed(1)
        prepared.step()
        steps.append(dict(prepared.model.named_parameters()))
    plain, deeper = steps
    assert list(plain) == list(deeper)
    for name, param in plain.items():
        torch.testing.assert_close(deeper[name].grad, param.grad, msg=name)


def test_scan_prediction_from_a_cuda_profile() -> None:
    workload = rnn_tagger_workload()
    profile = lightspeed.profile(workload, device="cuda", budget_s=0.3)
    predicted = lightspeed.predict(profile, workload=workload, scan_backward=True)
    assert predicted.prediction is not None
    (scan,) = predicted.prediction.scans
    assert scan.levels == scan_levels(20)
