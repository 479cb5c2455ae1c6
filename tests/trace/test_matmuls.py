"""Matrix products in traces: FLOPs and bytes from recorded shapes, their kernels found
by the launches inside them, and their place on the roofline of a catalog GPU."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from kineto import KinetoTrace
from trace_paths import trace

from lightspeed.dtypes import Precision
from lightspeed.hardware import catalog_hardware
from lightspeed.trace.analysis import analyse_rank
from lightspeed.trace.load import load_trace
from lightspeed.trace.matmuls import product

BF16 = "c10::BFloat16"


def test_products_from_recorded_shapes() -> None:
    mm = product("aten::mm", [[64, 32], [32, 16]], ["float", "float"])
    assert mm is not None
    assert (mm.flops, mm.bytes) == (2 * 64 * 32 * 16, 4 * (64 * 32 + 32 * 16 + 64 * 16))
    assert mm.precision is Precision.FP32 and mm.tensor_core_aligned() is None
    addmm = product("aten::addmm", [[16], [64, 32], [32, 16], [], []], [BF16] * 3 + ["Scalar"] * 2)
    assert addmm is not None and addmm.precision is Precision.BF16
    assert addmm.bytes == 2 * (64 * 32 + 32 * 16 + 64 * 16 + 16)
    assert addmm.tensor_core_aligned() is True
    bmm = product("aten::bmm", [[4, 141, 64], [4, 64, 141]], ["c10::Half"] * 2)
    assert bmm is not None and bmm.flops == 2 * 4 * 141 * 64 * 141
    assert bmm.tensor_core_aligned() is False  # 141 is not a multiple of 8
    # On TF32 tensor cores an fp32 product needs multiples of 4: 64, 32, 16 are.
    assert mm.tensor_core_aligned(Precision.TF32) is True
    baddbmm = product(
        "aten::baddbmm", [[4, 8, 8], [4, 8, 16], [4, 16, 8], [], []], [BF16] * 3 + ["Scalar"] * 2
    )
    assert baddbmm is not None
    assert baddbmm.bytes == 2 * (4 * (8 * 16 + 16 * 8 + 8 * 8) + 4 * 8 * 8)


@pytest.mark.parametrize(
    ("op", "dims", "types"),
    [
        ("aten::mm", [[64, 32], [16, 16]], ["float", "float"]),  # inner sizes differ
        ("aten::mm", [[64, 32]], ["float"]),  # one operand
        ("aten::mm", [[64, 32], [32, 16]], ["int", "int"]),  # integer product
        ("aten::mm", "not a list", None),
        ("aten::bmm", [[2, 4, 4], [3, 4, 4]], [BF16, BF16]),  # batches differ
        ("aten::mm", [[64, 32.5], [32.5, 16]], ["float", "float"]),
        ("aten::mm", [[True, 2], [2, 2]], ["float", "float"]),
        ("aten::mm", [[10**400, 2], [2, 2]], ["float", "float"]),  # no float holds its FLOPs
        ("aten::addmm", [[10**400], [2, 2], [2, 2]], ["float"] * 3),
        ("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3]], ["float", "float"]),
    ],
)
def test_shapes_that_make_no_product(op: str, dims: object, types: object) -> None:
    assert product(op, dims, types) is None


def test_products_on_the_roofline_of_an_h100(tmp_path: Path) -> None:
    # Three bf16 products, each launching one kernel from inside the op:
    # 4096³ in 200 µs, 4100 × 4096 × 4096 in 400 µs (4100 is no multiple of 8), and an
    # fp32 4096³ in 1000 µs, faster than the fp32 peak allows (TF32 ran it).
    h100 = catalog_hardware("h100-sxm")
    t = KinetoTrace(device_name="NVIDIA H100 80GB HBM3")
    t.step(1, 0, 2000)
    shapes = [
        ([[4096, 4096], [4096, 4096]], [BF16, BF16], 200),
        ([[4100, 4096], [4096, 4096]], [BF16, BF16], 400),
        ([[4096, 4096], [4096, 4096]], ["float", "float"], 1000),
    ]
    at = 0.0
    for dims, types, kernel_us in shapes:
        t.cpu_op("aten::mm", at, 10, **{"Input Dims": dims, "Input type": types})
        t.launch(at + 2, at + 20, kernel_us)
        at += 20 + kernel_us
    (step,) = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    m = step.matmuls
    assert m is not None and m.hardware == "h100-sxm" and m.ops == 3
    flops = [2 * 4096**3, 2 * 4100 * 4096**2, 2 * 4096**3]
    assert m.flops == sum(flops)
    assert m.time_s == pytest.approx(1600e-6)
    bw = h100.memory_bandwidth_bytes_per_s
    sols = [
        max(flops[0] / h100.peak_flops_per_s[Precision.BF16], 2 * 3 * 4096**2 / bw),
        max(flops[1] / h100.peak_flops_per_s[Precision.BF16], 2 * (2 * 4100 + 4096) * 4096 / bw),
        max(flops[2] / h100.peak_flops_per_s[Precision.TF32], 4 * 3 * 4096**2 / bw),
    ]
    assert flops[2] / h100.peak_flops_per_s[Precision.FP32] > 1000e-6  # so TF32 it was
    assert m.tf32_ops == 1
    assert m.sol_s == pytest.approx(sum(sols))
    assert m.fraction_of_sol == pytest.approx(sum(sols) / 1600e-6)
    assert m.memory_bound_s == 0.0  # 4096-sized products are far above the ridge
    assert m.unaligned_s == pytest.approx(400e-6)
    assert m.by_precision == pytest.approx({"bf16": 600e-6, "fp32": 1000e-6})
    # 400 µs of a 2 ms step in unaligned shapes: at best they would take their SoL.
    (finding,) = [f for f in step.findings if f.kind == "tensor-core-shapes"]
    assert finding.evidence["max_speedup"] == pytest.approx(1 / (1 - (400e-6 - sols[1]) / 2e-3))


def test_an_unknown_gpu_gets_rates_but_no_speed_of_light(tmp_path: Path) -> None:
    t = KinetoTrace(device_name="AMD Instinct MI325X")
    t.step(1, 0, 100)
    t.cpu_op("aten::mm", 0, 10, **{"Input Dims": [[8, 8], [8, 8]], "Input type": [BF16, BF16]})
    t.launch(2, 20, 4)
    (step,) = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    m = step.matmuls
    assert m is not None and m.flops == 2 * 8**3 and m.flops_per_s == pytest.approx(1024 / 4e-6)
    assert (m.hardware, m.sol_s, m.fraction_of_sol, m.memory_bound_s) == (None, None, None, None)


def test_fp32_products_on_an_amd_gpu_take_its_matrix_peak(tmp_path: Path) -> None:
    # One fp32 4096³ product in 5 ms on a GPU ROCm names generically, with the MI100's
    # 120 CUs and 32 GiB less a little: the MI100, whose matrix cores run fp32 at 46.1
    # TFLOP/s, twice its vector rate.
    mi100 = catalog_hardware("mi100")
    t = KinetoTrace(device_name="AMD Radeon Graphics")
    t.step(1, 0, 6000)
    dims = [[4096, 4096], [4096, 4096]]
    t.cpu_op("aten::mm", 0, 10, **{"Input Dims": dims, "Input type": ["float", "float"]})
    t.launch(2, 20, 5000)
    document = t.document()
    document["deviceProperties"][0] |= {"numSms": 120, "totalGlobalMem": 34_342_961_152}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document))
    (step,) = analyse_rank(load_trace(path)).steps
    m = step.matmuls
    assert m is not None and m.hardware == "mi100" and m.tf32_ops == 0
    # max(2 · 4096³ / 46.1e12, 4 B · 3 · 4096² / 1.2288e12) = max(2.98 ms, 0.16 ms)
    assert m.sol_s == pytest.approx(2 * 4096**3 / mi100.matmul_peak(Precision.FP32))
    assert mi100.matmul_peak(Precision.FP32) == 46.1e12


def test_bert_on_an_h100_against_its_own_events() -> None:
    path = trace("tracelens-h100-bert-small-inference")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    addmms = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"]
    expected = 0
    for e in addmms:
        (m, k), (_, n) = e["args"]["Input Dims"][1:3]
        expected += 2 * m * k * n
    rank = analyse_rank(load_trace(path))
    m = rank.whole.matmuls
    assert m is not None
    assert m.ops == len(addmms) == 26 and m.flops == expected
    assert m.hardware == "h100-sxm" and m.by_precision.keys() == {"bf16"}
    # 141 tokens: every product has a dimension that is no multiple of 8.
    assert m.unaligned_s == pytest.approx(m.time_s)
    assert m.fraction_of_sol is not None and 0 < m.fraction_of_sol < 1


def test_on_a_trace_of_the_cpu_alone_each_product_is_timed_by_its_op(tmp_path: Path) -> None:
    # Two steps with no device: a 64×32×16 product (30 µs) and a 141-wide bf16 one (20
    # µs, unaligned for tensor cores, which a CPU has not) in the first, one in the second
    # that starts in it and ends past it.
    t = KinetoTrace()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    fp32 = ["float", "float"]
    t.cpu_op("aten::mm", 10, 30, **{"Input Dims": [[64, 32], [32, 16]], "Input type": fp32})
    dims = [[4, 141, 64], [4, 64, 141]]
    t.cpu_op("aten::bmm", 50, 20, **{"Input Dims": dims, "Input type": [BF16] * 2})
    t.cpu_op("aten::mm", 150, 80, **{"Input Dims": [[8, 8], [8, 8]], "Input type": fp32})
    analysis = analyse_rank(load_trace(t.write(tmp_path / "t.json")))
    first, second = analysis.steps
    m = first.matmuls
    assert m is not None and m.on_host and m.ops == 2
    assert m.flops == 2 * 64 * 32 * 16 + 2 * 4 * 141 * 64 * 141
    assert m.time_s == pytest.approx(50e-6)
    assert m.by_precision == pytest.approx({"fp32": 30e-6, "bf16": 20e-6})
    assert (m.unaligned_s, m.sol_s, m.fraction_of_sol) == (0.0, None, None)
    assert second.matmuls is not None and second.matmuls.flops == 2 * 8**3
    assert second.matmuls.time_s == pytest.approx(80e-6)
