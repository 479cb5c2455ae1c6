"""Analysis of hand-built profiles: exact SoL per op, aggregates, MFU, findings, JSON round-trip."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import examples
from lightspeed.analysis.profile_analysis import analyse
from lightspeed.analysis.step_roofline import module_ancestors
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Calibration, DeviceKind, Hardware, MemoryLevel
from lightspeed.facts.profile import OpTimeSource, Profile
from lightspeed.facts.records import OPTIMIZER_MODULE, MemoryBreakdown, OpRecord, Phase
from lightspeed.facts.timing import WorkloadInfo, measurement_from_times
from lightspeed.hardware import catalog_hardware
from lightspeed.report.profile_json import profile_from_doc
from lightspeed.report.profile_report import profile_document
from lightspeed.report.render_json import dumps, render
from lightspeed.rules import Bound, FindingKind

CPU = Hardware(
    id="local",
    name="test CPU",
    kind=DeviceKind.CPU,
    peak_flops_per_s={Precision.FP32: 100e9, Precision.BF16: 400e9},
    memory_bandwidth_bytes_per_s=10e9,
)
# The same CPU with a 1 MiB last-level cache that serves 40 GB/s.
CACHED_CPU = dataclasses.replace(CPU, cache_bytes=2**20, cache_bandwidth_bytes_per_s=40e9)


def op(
    index: int,
    name: str,
    module: str,
    phase: Phase,
    flops: int,
    bytes_read: int,
    time_s: float | None,
    *,
    shapes: tuple[tuple[int, ...], ...] = (),
    dtype: str = "float32",
    macs: int | None = None,
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
        macs=macs,
        bytes_read=bytes_read,
        bytes_written=0,
        time_s=time_s,
    )


def profile_of(ops: list[OpRecord], hw: Hardware = CPU, step_s: float = 1e-3) -> Profile:
    return Profile(
        workload=WorkloadInfo(
            name="hand",
            batch_size=4,
            device=Device.CPU,
            precision=Precision.FP32,
            parameter_count=100,
        ),
        hardware=hw,
        timing=measurement_from_times([step_s] * 5),
        ops=tuple(ops),
        op_time_source=OpTimeSource.CPU,
        profiled_step_s=step_s,
        unattributed_s=step_s / 10,
        memory=MemoryBreakdown(
            parameters_bytes=400,
            gradients_bytes=400,
            optimizer_state_bytes=808,
            activations_bytes=64,
            temporaries_bytes=32,
            inputs_bytes=16,
            peak_bytes=1656,
            at_peak_bytes={
                "parameters": 400,
                "gradients": 400,
                "optimizer_state": 808,
                "activations": 0,
                "temporaries": 32,
                "inputs": 16,
            },
            method="tracked-storages",
        ),
    )


OPS = [
    # 64×64×64 matmul: 2·64³ = 524,288 FLOPs; 3·64²·4 B = 49,152 B. On 100 GFLOP/s, 10 GB/s:
    # compute 5.243 µs, memory 4.915 µs → compute bound, SoL 5.243 µs.
    op(
        0,
        "aten::mm",
        "layers.0",
        Phase.FORWARD,
        524_288,
        49_152,
        20e-6,
        shapes=((64, 64), (64, 64)),
        macs=262_144,
    ),
    # relu on 64·64 fp32: 4,096 FLOPs; reads and writes 16 KiB → 32,768 B: memory 3.277 µs.
    op(1, "aten::relu", "layers.1", Phase.FORWARD, 4_096, 32_768, 4e-6),
    op(
        2,
        "aten::mm",
        "layers.0",
        Phase.BACKWARD,
        1_048_576,
        98_304,
        30e-6,
        shapes=((64, 64), (64, 64)),
        macs=524_288,
    ),
    # A tiny optimizer op: SoL 0.12 µs against 5 µs measured → overhead bound.
    op(3, "aten::add_", OPTIMIZER_MODULE, Phase.OPTIMIZER, 100, 1_200, 5e-6),
    op(4, "aten::view", "layers.0", Phase.FORWARD, 0, 0, None),
]


def test_op_speed_of_light_is_exact() -> None:
    a = analyse(profile_of(OPS))
    mm, relu, _, add, view = a.ops
    assert mm.sol_time_s == pytest.approx(524_288 / 100e9)
    assert mm.bound is Bound.COMPUTE
    assert mm.efficiency == pytest.approx((524_288 / 100e9) / 20e-6)
    assert relu.sol_time_s == pytest.approx(32_768 / 10e9)
    assert relu.bound is Bound.MEMORY  # 3.3 µs SoL, 82 % of it reached: not overhead
    assert add.bound is Bound.OVERHEAD
    assert view.point is None and view.bound is None and view.sol_time_s == 0.0


def test_aggregates_by_phase_and_module() -> None:
    a = analyse(profile_of(OPS))
    assert a.phases[Phase.FORWARD].flops == 524_288 + 4_096
    assert a.phases[Phase.BACKWARD].time_s == pytest.approx(30e-6)
    assert list(a.phases) == [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER]
    assert a.modules["layers"].flops == 524_288 + 4_096 + 1_048_576
    assert a.modules["layers.0"].op_count == 3
    assert a.modules[""].flops == sum(o.flops for o in OPS)
    assert module_ancestors("a.b.c") == ["", "a", "a.b", "a.b.c"]


def test_totals_mfu_and_hfu() -> None:
    a = analyse(profile_of(OPS, step_s=1e-3))
    t = a.totals
    # model FLOPs: forward + backward = 524,288 + 4,096 + 1,048,576 = 1,576,960
    assert t.model_flops == 1_576_960
    assert t.flops == 1_576_960 + 100
    assert t.mfu == pytest.approx(1_576_960 / (1e-3 * 100e9))
    assert t.hfu == pytest.approx(1_577_060 / (1e-3 * 100e9))
    assert t.efficiency == pytest.approx(t.sol_time_s / 1e-3)
    assert [o.op.index for o in a.top(2)] == [2, 0]


def _bf16_matmuls(odd_time_s: float) -> list[OpRecord]:
    odd = op(
        0,
        "aten::addmm",
        "head",
        Phase.FORWARD,
        2 * 30 * 100 * 50,
        1000,
        odd_time_s,
        shapes=((50,), (30, 100), (100, 50)),
        dtype="bfloat16",
        macs=30 * 100 * 50,
    )
    even = op(
        1,
        "aten::mm",
        "body",
        Phase.FORWARD,
        2 * 64**3,
        1000,
        1e-5,
        shapes=((64, 64), (64, 64)),
        dtype="bfloat16",
        macs=64**3,
    )
    return [odd, even]


def test_tensor_core_finding_names_module_and_padded_shape() -> None:
    a100 = catalog_hardware("a100-80gb-sxm")
    # 100 µs of a 1 ms step (10 % ≥ 5 %) in a bf16 product with M=30, K=100, N=50.
    found = [
        f
        for f in analyse(profile_of(_bf16_matmuls(100e-6), hw=a100)).findings
        if f.kind is FindingKind.TENSOR_CORE_SHAPES
    ]
    assert len(found) == 1
    assert found[0].evidence["unaligned_s"] == pytest.approx(100e-6)
    assert found[0].evidence["example"] == (
        "aten::addmm in head has M=30×K=100×N=50: pad to M=32×K=104×N=56"
    )
    assert "not a multiple of 8" in found[0].message
    # 10 µs of the step (1 %) is below the share worth a finding, as in a trace.
    quiet = analyse(profile_of(_bf16_matmuls(10e-6), hw=a100))
    assert FindingKind.TENSOR_CORE_SHAPES not in {f.kind for f in quiet.findings}
    # The same ops on a CPU are not flagged: it has no tensor cores.
    kinds = {f.kind for f in analyse(profile_of(_bf16_matmuls(100e-6))).findings}
    assert FindingKind.TENSOR_CORE_SHAPES not in kinds


def test_json_has_the_documented_keys() -> None:
    doc = json.loads(dumps(render(profile_document(analyse(profile_of(OPS))))))
    assert doc["schema_version"] == 4
    assert set(doc["workload"]) >= {"name", "batch_size", "dtype", "device"}
    assert set(doc["timing"]) >= {"median_s", "replicates", "iqr_s", "samples_per_s"}
    assert set(doc["totals"]) >= {"flops", "bytes", "sol_time_s", "efficiency", "mfu"}
    assert set(doc["phases"]["forward"]) == {"flops", "bytes", "time_s", "sol_time_s", "op_count"}
    assert set(doc["ops"][0]) >= {
        "name",
        "module",
        "phase",
        "flops",
        "bytes",
        "time_s",
        "sol_time_s",
        "bound",
    }
    assert set(doc["memory"]) >= {
        "parameters_bytes",
        "gradients_bytes",
        "optimizer_state_bytes",
        "activations_bytes",
        "temporaries_bytes",
        "inputs_bytes",
        "peak_bytes",
    }
    assert all(set(f) == {"kind", "message", "evidence"} for f in doc["findings"])


op_records = st.builds(
    op,
    index=st.integers(0, 1000),
    name=st.sampled_from(["aten::mm", "aten::add", "aten::relu"]),
    module=st.sampled_from(["", "a", "a.b", OPTIMIZER_MODULE]),
    phase=st.sampled_from(list(Phase)),
    flops=st.integers(0, 10**12),
    bytes_read=st.integers(0, 10**10),
    time_s=st.one_of(st.none(), st.floats(1e-9, 10.0)),
)


hardwares = st.sampled_from([CPU, CACHED_CPU])


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(op_records, max_size=20), st.floats(1e-6, 10.0), hardwares)
def test_json_round_trip(ops: list[OpRecord], step_s: float, hw: Hardware) -> None:
    profile = profile_of(ops, hw=hw, step_s=step_s)
    doc = json.loads(dumps(render(profile_document(analyse(profile)))))
    assert profile_from_doc(doc) == profile


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(op_records, min_size=1, max_size=20), hardwares)
def test_sol_never_exceeds_measured_when_rates_are_within_ceilings(
    ops: list[OpRecord], hw: Hardware
) -> None:
    # Give each op the time it would take at exactly its roofline rate, or slower:
    # the analysis must then find SoL ≤ measured for every op and for the step.
    timed = []
    for o in ops:
        a = analyse(profile_of([o], hw=hw)).ops[0]
        timed.append(OpRecord(**{**o.__dict__, "time_s": a.sol_time_s * 1.5 + 1e-9}))
    step_s = sum(o.time_s or 0 for o in timed) + 1e-6
    analysis = analyse(profile_of(timed, hw=hw, step_s=step_s))
    for a in analysis.ops:
        assert a.sol_time_s <= (a.time_s or 0)
    assert analysis.totals.sol_time_s <= (analysis.totals.step_time_s or 0)


def test_ops_that_fit_in_the_cache_use_its_bandwidth() -> None:
    small = op(0, "aten::relu", "a", Phase.FORWARD, 4_096, 32_768, 4e-6)
    large = op(1, "aten::relu", "a", Phase.FORWARD, 524_288, 4 * 2**20, 1e-3)
    a_small, a_large = analyse(profile_of([small, large], hw=CACHED_CPU)).ops
    # 32,768 B fit in 1 MiB: 32,768 / 40e9 = 0.8192 µs, not 3.277 µs from memory.
    assert a_small.memory_level is MemoryLevel.CACHE
    assert a_small.sol_time_s == pytest.approx(32_768 / 40e9)
    # 4 MiB do not fit: 4,194,304 / 10e9 = 419.4 µs.
    assert a_large.memory_level is MemoryLevel.DRAM
    assert a_large.sol_time_s == pytest.approx(4 * 2**20 / 10e9)
    # Without a known cache every op's roof is memory.
    assert analyse(profile_of([small])).ops[0].memory_level is MemoryLevel.DRAM


def test_a_cache_needs_both_size_and_bandwidth() -> None:
    with pytest.raises(ConfigError, match="both cache_bytes and cache_bandwidth"):
        dataclasses.replace(CPU, cache_bytes=2**20)


def test_ops_faster_than_the_speed_of_light_are_reported() -> None:
    # relu: SoL 3.277 µs measured in 2 µs, 164 % of the speed of light (limit 125 %).
    fast = op(0, "aten::relu", "a", Phase.FORWARD, 4_096, 32_768, 2e-6)
    fine = op(1, "aten::relu", "a", Phase.FORWARD, 4_096, 32_768, 4e-6)
    calibrated = dataclasses.replace(
        CPU,
        calibration=Calibration(
            method="test",
            library="none",
            threads=1,
            torch_version="x",
            measured_at="now",
            memory_kernel_bytes_per_s={"copy": 8e9, "scale": 10e9},
        ),
    )
    found = [
        f
        for f in analyse(profile_of([fast, fine], hw=calibrated)).findings
        if f.kind == "above-speed-of-light"
    ]
    assert len(found) == 1
    assert found[0].evidence["ops"] == 1
    assert found[0].evidence["max_efficiency"] == pytest.approx(32_768 / 10e9 / 2e-6)
    # It names the op, the roof it beat, the kernel that set that roof, and the fix: a
    # kernel set that covers the op, not a recalibration.
    message = found[0].message
    assert "aten::relu in a (" in message
    assert "reached 164% of its memory bandwidth, set by the calibration kernel scale 1:1" in (
        message
    )
    assert "the calibration lacks a kernel as fast as this op" in message
    assert found[0].evidence["kernel"] == "scale 1:1"
    # On a datasheet device the fix is the device named.
    (datasheet,) = [
        f for f in analyse(profile_of([fast], hw=CPU)).findings if f.kind == "above-speed-of-light"
    ]
    assert "check that --hardware names the device" in datasheet.message
    # Within the ceilings nothing is said.
    kinds = {f.kind for f in analyse(profile_of([fine], hw=calibrated)).findings}
    assert "above-speed-of-light" not in kinds


def test_the_step_bound_uses_the_trace_rules() -> None:
    # Step 1 ms, 0.1 ms unattributed + 5 µs of overhead-bound add_: host 10.5 % < 50 %.
    # Compute-bound matmuls take 50 µs, the memory-bound relu 4 µs: compute, on a CPU.
    assert analyse(profile_of(OPS)).bound is Bound.COMPUTE
    # The same ops in a step of 20 ms of which 18 ms ran outside them: host bound.
    slow = dataclasses.replace(profile_of(OPS, step_s=20e-3), unattributed_s=18e-3)
    assert analyse(slow).bound is Bound.OVERHEAD
    # Only memory-bound time: memory.
    relu = op(0, "aten::relu", "a", Phase.FORWARD, 4_096, 32_768, 40e-6)
    assert analyse(profile_of([relu], step_s=50e-6)).bound is Bound.MEMORY


def test_time_in_ops_with_unknown_flops_is_reported_and_warned_above_one_percent() -> None:
    known = op(0, "aten::mm", "a", Phase.FORWARD, 2 * 64**3, 1000, 95e-6, macs=64**3)
    rnn = dataclasses.replace(
        op(1, "aten::mkldnn_rnn_layer", "lstm", Phase.FORWARD, 0, 4000, 5e-6), flops_known=False
    )
    a = analyse(profile_of([known, rnn]))
    # 5 µs of 100 µs of op time: 5 % ≥ 1 %.
    assert a.totals.unknown_flops_share == pytest.approx(0.05)
    assert a.totals.unknown_flops_ops == ("aten::mkldnn_rnn_layer",)
    (finding,) = [f for f in a.findings if f.kind is FindingKind.UNKNOWN_FLOPS]
    assert "5.0% of the op time" in finding.message and "mkldnn_rnn_layer" in finding.message
    doc = render(profile_document(a))
    assert doc["totals"]["unknown_flops_ops"] == ["aten::mkldnn_rnn_layer"]
    # 0.5 µs of 95.5 µs (0.52 %): reported in the totals, no finding.
    small = analyse(profile_of([known, dataclasses.replace(rnn, time_s=0.5e-6)]))
    assert 0 < small.totals.unknown_flops_share < 0.01
    assert FindingKind.UNKNOWN_FLOPS not in {f.kind for f in small.findings}


def test_a_matmul_op_takes_the_precision_of_its_largest_floating_input() -> None:
    from lightspeed.analysis.step_roofline import op_precision

    # A fused RNN backward: bf16 tensors, then a byte workspace; an addmm: bias, a, b.
    rnn = dataclasses.replace(
        op(0, "aten::mkldnn_rnn_layer_backward", "rnn", Phase.BACKWARD, 10, 10, 1e-6, macs=5),
        input_dtypes=("bfloat16", "bfloat16", "uint8"),
    )
    assert op_precision(rnn, CPU) is Precision.BF16
    plain = dataclasses.replace(rnn, input_dtypes=("uint8",))
    assert op_precision(plain, CPU) is Precision.FP32
    # Attention's backward: bf16 gradient, q, k, v and output, then the fp32 log-sum-exp.
    qkv = (8, 12, 1024, 64)
    attention = dataclasses.replace(
        rnn,
        name="aten::_scaled_dot_product_cudnn_attention_backward",
        input_dtypes=("bfloat16",) * 5 + ("float32", "int64"),
        input_shapes=(qkv,) * 5 + ((8, 12, 1024, 1), ()),
    )
    assert op_precision(attention, CPU) is Precision.BF16


def test_only_a_convolution_faster_than_fp32_is_placed_on_tf32() -> None:
    from factories import op as make_op
    from lightspeed.analysis.step_roofline import op_precision
    from lightspeed.hardware import catalog_hardware

    a100 = catalog_hardware("a100-40gb-sxm")  # fp32 19.5 TFLOP/s, TF32 156
    # 2 TFLOP in 50 ms: 40 TFLOP/s, twice what fp32 math allows.
    fast = make_op(0, 2 * 10**12, 10**6, 0.05, macs=10**12)
    conv = dataclasses.replace(fast, name="aten::convolution")
    # cuDNN runs fp32 convolutions on TF32 by default; cuBLAS runs products in fp32 unless
    # told otherwise, and a product that reads faster (NeuSight's shares of a node's time,
    # with TF32 off) stays against the fp32 peak.
    assert op_precision(conv, a100) is Precision.TF32
    assert op_precision(fast, a100) is Precision.FP32
    slow = dataclasses.replace(conv, time_s=1.0)
    assert op_precision(slow, a100) is Precision.FP32
