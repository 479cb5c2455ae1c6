"""Findings that name a layer's change: channels_last for NCHW convolutions, cudnn.benchmark
on CUDA, fused recurrent kernels, and the batch size that aligns a product's rows."""

from __future__ import annotations

import dataclasses

import pytest

from lightspeed.analysis.profile_analysis import analyse
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind, Hardware
from lightspeed.facts.profile import OpTimeSource, Profile
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.facts.timing import WorkloadInfo, measurement_from_times
from lightspeed.hardware import catalog_hardware
from lightspeed.report.profile_json import profile_from_doc
from lightspeed.report.profile_report import profile_document
from lightspeed.report.render_json import dumps, render
from lightspeed.rules import Finding, FindingKind

# 1 GFLOP/s and 1 TB/s: an op of F FLOPs (and few bytes) has a speed of light of F ns.
HW = Hardware(
    id="hand",
    name="hand-made device",
    kind=DeviceKind.CPU,
    peak_flops_per_s={Precision.FP32: 1e9},
    memory_bandwidth_bytes_per_s=1e12,
)
MS = 1e-3


def op(
    index: int,
    name: str,
    *,
    flops: int,
    time_s: float,
    module: str = "net",
    phase: Phase = Phase.FORWARD,
    shapes: tuple[tuple[int, ...], ...] = (),
    channels_last: bool | None = None,
    dtype: str = "float32",
) -> OpRecord:
    return OpRecord(
        index=index,
        name=name,
        module=module,
        phase=phase,
        input_shapes=shapes,
        input_dtypes=tuple(dtype for _ in shapes),
        output_shapes=(),
        output_dtypes=(),
        flops=flops,
        macs=flops // 2,
        bytes_read=8,
        bytes_written=0,
        time_s=time_s,
        channels_last=channels_last,
    )


def profile_of(
    ops: list[OpRecord],
    *,
    device: Device = Device.CPU,
    hw: Hardware = HW,
    batch_size: int = 4,
    cudnn_benchmark: bool | None = None,
    step_s: float = 10 * MS,
) -> Profile:
    return Profile(
        workload=WorkloadInfo(
            name="hand",
            batch_size=batch_size,
            device=device,
            precision=Precision.FP32,
            parameter_count=1,
        ),
        hardware=hw,
        timing=measurement_from_times([step_s] * 5),
        ops=tuple(ops),
        op_time_source=OpTimeSource.CPU,
        profiled_step_s=step_s,
        unattributed_s=0.0,
        cudnn_benchmark=cudnn_benchmark,
    )


def found(profile: Profile, kind: FindingKind) -> list[Finding]:
    return [f for f in analyse(profile).findings if f.kind is kind]


def convs(channels_last: bool | None) -> list[OpRecord]:
    """Two convolutions of 4 ms in a 10 ms step: 8 ms, 80% of it. Their speed of light is
    20 µs each (20,000 FLOPs at 1 GFLOP/s), 0.5% of their time."""
    x = (8, 16, 8, 8)
    w = (16, 16, 3, 3)
    return [
        op(
            0,
            "aten::convolution",
            flops=20_000,
            time_s=4 * MS,
            shapes=(x, w),
            channels_last=channels_last,
        ),
        op(
            1,
            "aten::convolution_backward",
            flops=20_000,
            time_s=4 * MS,
            phase=Phase.BACKWARD,
            shapes=(x, x, w),
            channels_last=channels_last,
        ),
    ]


def test_nchw_convolutions_far_below_their_speed_of_light_suggest_channels_last() -> None:
    [f] = found(profile_of(convs(channels_last=False)), FindingKind.MEMORY_FORMAT)
    assert "model.to(memory_format=torch.channels_last)" in f.message
    assert "80% of the step at 0.5% of their speed of light" in f.message
    assert f.evidence["ops"] == "aten::convolution ×1, aten::convolution_backward ×1"
    assert f.evidence["time_s"] == pytest.approx(8 * MS)
    assert f.evidence["fraction_of_sol"] == pytest.approx(40e-6 / 8e-3)
    # At 25% of their speed of light each would take 80 µs: 2 × (4 ms − 80 µs) saved.
    assert f.evidence["estimated_saving_s"] == pytest.approx(2 * (4 * MS - 80e-6))
    assert "save about 7.84 ms" in f.message
    # At best they would run at their speed of light: 10 / (10 − 7.96) ms.
    assert f.max_speedup == pytest.approx(10 / (10 - 7.96))
    # Already channels-last, or a layout that does not matter: nothing to say.
    assert not found(profile_of(convs(channels_last=True)), FindingKind.MEMORY_FORMAT)
    assert not found(profile_of(convs(channels_last=None)), FindingKind.MEMORY_FORMAT)


def test_convolutions_under_a_tenth_of_the_step_or_near_their_speed_of_light_are_quiet() -> None:
    small = [dataclasses.replace(o, time_s=0.4 * MS) for o in convs(False)]  # 8% of the step
    assert not found(profile_of(small), FindingKind.MEMORY_FORMAT)
    fast = [dataclasses.replace(o, time_s=60e-6) for o in convs(False)]  # 33% of SoL
    assert not found(profile_of(fast, step_s=1e-3), FindingKind.MEMORY_FORMAT)


def test_cudnn_benchmark_is_suggested_only_on_cuda_when_it_is_off() -> None:
    off = profile_of(convs(True), device=Device.CUDA, cudnn_benchmark=False)
    [f] = found(off, FindingKind.CUDNN_BENCHMARK)
    assert "torch.backends.cudnn.benchmark = True" in f.message
    assert f.evidence["estimated_saving_s"] == pytest.approx(2 * (4 * MS - 80e-6))
    on = profile_of(convs(True), device=Device.CUDA, cudnn_benchmark=True)
    assert not found(on, FindingKind.CUDNN_BENCHMARK)
    # On a CPU there is no cuDNN to speak of.
    cpu = profile_of(convs(False))
    assert not any("cudnn" in f.message.lower() for f in analyse(cpu).findings)


def mkldnn_lstm(backward_s: float) -> list[OpRecord]:
    """One oneDNN LSTM layer: 16 timesteps, batch 4, hidden 64 (gates 4 × 64 = 256)."""
    forward_shapes = ((16, 4, 64), (256, 64), (256, 64), (256,), (256,), (4, 64), (4, 64))
    return [
        op(0, "aten::mkldnn_rnn_layer", flops=50_000, time_s=1 * MS, shapes=forward_shapes),
        op(
            1,
            "aten::mkldnn_rnn_layer_backward",
            flops=100_000,
            time_s=backward_s,
            phase=Phase.BACKWARD,
            shapes=(*forward_shapes, (16, 4, 64), (4, 64), (4, 64), (16, 4, 64), (270336,)),
        ),
    ]


def test_fused_rnn_kernels_far_below_their_speed_of_light_name_batch_and_backward() -> None:
    [f] = found(profile_of(mkldnn_lstm(backward_s=5 * MS)), FindingKind.RECURRENT_LAYERS)
    # Forward 50 µs of 1 ms (5%), backward 100 µs of 5 ms (2%): 150 µs of 6 ms together.
    assert f.evidence["fraction_of_sol"] == pytest.approx(150e-6 / 6e-3)
    assert f.evidence["backward_fraction_of_sol"] == pytest.approx(0.02)
    assert (f.evidence["timesteps"], f.evidence["batch"], f.evidence["hidden"]) == (16, 4, 64)
    assert f.message.startswith("oneDNN's fused RNN kernels")
    assert "60% of the step at 2.5% of their speed of light (backward: 2%)" in f.message
    assert "a larger batch (32 or more rows per timestep; now 4)" in f.message
    # At 25%: forward 200 µs, backward 400 µs; saves 0.8 + 4.6 ms.
    assert f.evidence["estimated_saving_s"] == pytest.approx(5.4 * MS)
    # Under a tenth of the step: nothing.
    quiet = [dataclasses.replace(o, time_s=0.4 * MS) for o in mkldnn_lstm(0.4 * MS)]
    assert not found(profile_of(quiet), FindingKind.RECURRENT_LAYERS)


def cell_loop(steps: int) -> list[OpRecord]:
    """An LSTMCell in a Python loop: per timestep one addmm, three sigmoids, two tanh."""
    ops: list[OpRecord] = []
    for _ in range(steps):
        for name, flops in (
            (("aten::addmm", 2_000),) + (("aten::sigmoid", 10),) * 3 + (("aten::tanh", 10),) * 2
        ):
            ops.append(op(len(ops), name, flops=flops, time_s=0.1 * MS, module="decoder.cell"))
    return ops


def test_pytorchs_own_cpu_gru_cell_with_in_place_gates_is_a_loop_too() -> None:
    # PyTorch's CPU nn.GRU runs its cells step by step, its gates in place.
    renamed = {"aten::sigmoid": "aten::sigmoid_", "aten::tanh": "aten::tanh_"}
    ops = [dataclasses.replace(o, name=renamed.get(o.name, o.name)) for o in cell_loop(8)]
    [f] = found(profile_of(ops), FindingKind.RECURRENT_LAYERS)
    assert "PyTorch has no fused GRU there" in f.message


def test_a_cell_loop_is_told_to_use_the_fused_layer() -> None:
    # 8 timesteps × 6 ops × 0.1 ms = 4.8 ms of a 10 ms step.
    [f] = found(profile_of(cell_loop(8)), FindingKind.RECURRENT_LAYERS)
    assert "recurrent layers in decoder.cell run one timestep at a time" in f.message
    assert "nn.LSTM" in f.message
    assert f.evidence["matrix_products"] == 8
    assert f.evidence["time_s"] == pytest.approx(4.8 * MS)
    on_gpu = profile_of(cell_loop(8), device=Device.CUDA)
    [g] = found(on_gpu, FindingKind.RECURRENT_LAYERS)
    assert "cuDNN's fused RNN kernel" in g.message
    # Fewer timesteps than a loop shows: not taken for one.
    assert not found(profile_of(cell_loop(4)), FindingKind.RECURRENT_LAYERS)


def test_tensor_core_finding_names_the_batch_size_that_aligns_the_rows() -> None:
    a100 = catalog_hardware("a100-80gb-sxm")
    # bf16 rows 6 × 5 = 30 (batch 6, 5 tokens a sample): batch 8 makes 40, a multiple of 8.
    product = op(
        0,
        "aten::addmm",
        flops=2 * 30 * 64 * 64,
        time_s=1 * MS,
        module="head",
        shapes=((64,), (30, 64), (64, 64)),
        dtype="bfloat16",
    )
    [f] = found(profile_of([product], hw=a100, batch_size=6), FindingKind.TENSOR_CORE_SHAPES)
    assert f.evidence["aligned_batch_size"] == 8
    assert "a batch of 8 (now 6) puts them on it" in f.message
    # Batch 12 × 5 = 60 rows: 8 (40 rows) below it, 16 (80 rows) above.
    [g] = found(
        profile_of([product_rows(product, 60)], hw=a100, batch_size=12),
        FindingKind.TENSOR_CORE_SHAPES,
    )
    assert "a batch of 16 or 8 (now 12)" in g.message
    # Rows the batch does not divide are not the batch's: no batch size is named.
    [h] = found(profile_of([product], hw=a100, batch_size=4), FindingKind.TENSOR_CORE_SHAPES)
    assert "aligned_batch_size" not in h.evidence


def product_rows(product: OpRecord, rows: int) -> OpRecord:
    return dataclasses.replace(product, input_shapes=((64,), (rows, 64), (64, 64)))


def test_layout_and_cudnn_benchmark_survive_the_json_round_trip() -> None:
    profile = profile_of(convs(False), device=Device.CUDA, cudnn_benchmark=False)
    doc = render(profile_document(analyse(profile)))
    loaded = profile_from_doc(doc)
    assert loaded.cudnn_benchmark is False
    assert [o.channels_last for o in loaded.ops] == [False, False]
    assert dumps(render(profile_document(analyse(loaded)))) == dumps(doc)
    # A document written before ops recorded their layout loads with it unknown.
    for o in doc["ops"]:
        del o["channels_last"]
    assert [o.channels_last for o in profile_from_doc(doc).ops] == [None, None]
