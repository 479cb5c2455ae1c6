"""The hardware catalog: cited datasheet numbers, lookup, the local GPU's mapping."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError, UnknownNameError
from lightspeed.facts.hardware import hardware_from_dict, hardware_to_dict
from lightspeed.hardware import (
    catalog_hardware,
    catalog_id_for_device,
    catalog_id_for_device_name,
    catalog_ids,
)
from lightspeed.hardware.catalog import catalog_data

REQUIRED_IDS = [
    "p4",
    "p100-pcie-16gb",
    "v100-sxm2",
    "v100-pcie-32gb",
    "a100-40gb-sxm",
    "a100-80gb-sxm",
    "a100-40gb-pcie",
    "a100-80gb-pcie",
    "h100-sxm",
    "h200-sxm",
    "b200",
    "l4",
    "t4",
    "rtx-4090",
    "rtx-3090",
    "mi100",
    "mi210",
    "mi250-gcd",
    "mi300x",
]
# What a datasheet does not give: NVIDIA publishes no boost clock or L2 size for the B200.
UNPUBLISHED = {("b200", "clock_hz"), ("b200", "l2_bytes")}
GIB = 2**30


def test_catalog_has_the_reference_gpus() -> None:
    assert set(REQUIRED_IDS) <= set(catalog_ids())


def test_a100_and_h100_dense_peaks() -> None:
    a100 = catalog_hardware("a100-80gb-sxm")
    assert a100.peak_flops_per_s[Precision.BF16] == 312e12
    assert a100.memory_bandwidth_bytes_per_s == 2.039e12
    h100 = catalog_hardware("h100-sxm")
    # The datasheet prints 1,979 TFLOP/s with 2:4 sparsity; the dense figure is half.
    assert h100.peak_flops_per_s[Precision.BF16] == 989.4e12
    assert h100.memory_bandwidth_bytes_per_s == 3.35e12


def test_unsupported_precisions_are_absent() -> None:
    for hw_id in ("p4", "p100-pcie-16gb", "v100-sxm2", "v100-pcie-32gb", "t4"):
        assert Precision.BF16 not in catalog_hardware(hw_id).peak_flops_per_s, hw_id
    assert Precision.FP8 not in catalog_hardware("a100-40gb-sxm").peak_flops_per_s
    # The P4's fp16 runs at a small fraction of its fp32 and no datasheet gives it.
    assert catalog_hardware("p4").peak_flops_per_s.keys() == {Precision.FP32, Precision.INT8}


@pytest.mark.parametrize("hw_id", REQUIRED_IDS)
def test_every_entry_has_its_datasheet_facts(hw_id: str) -> None:
    hw = catalog_hardware(hw_id)
    for field in ("sm_count", "clock_hz", "l2_bytes", "board_power_w", "vendor", "memory_bytes"):
        if (hw_id, field) not in UNPUBLISHED:
            assert getattr(hw, field) is not None, f"{hw_id}.{field} is missing"
    assert hw.vendor in ("nvidia", "amd")
    # Only AMD's matrix units run a precision (fp64, fp32) faster than its vector rate.
    assert bool(hw.matrix_peak_flops_per_s) == (hw.vendor == "amd")


@pytest.mark.parametrize(
    ("hw_id", "cuda_cores"),
    [
        # The CUDA cores of each whitepaper: 20 × 128, 56 × 64, 40 × 64, 80 × 64, 108 × 64.
        ("p4", 2560),
        ("p100-pcie-16gb", 3584),
        ("t4", 2560),
        ("v100-sxm2", 5120),
        ("v100-pcie-32gb", 5120),
        ("a100-40gb-sxm", 6912),
        ("a100-40gb-pcie", 6912),
        ("a100-80gb-pcie", 6912),
    ],
)
def test_nvidia_fp32_is_two_flops_per_cuda_core_and_clock(hw_id: str, cuda_cores: int) -> None:
    # One FMA (2 FLOPs) per CUDA core per clock: P4 2 × 2560 × 1.063 GHz = 5.44 (5.5);
    # P100 2 × 3584 × 1.303 = 9.34 (9.3); T4 2 × 2560 × 1.59 = 8.14 (8.1);
    # V100 PCIe 2 × 5120 × 1.38 = 14.13 (14); A100 2 × 6912 × 1.41 = 19.49 (19.5) TFLOP/s.
    hw = catalog_hardware(hw_id)
    assert hw.clock_hz is not None
    assert 2 * cuda_cores * hw.clock_hz == pytest.approx(hw.peak(Precision.FP32), rel=0.02)


@pytest.mark.parametrize("hw_id", ["mi100", "mi210", "mi250-gcd"])
def test_amd_fp32_is_two_flops_per_lane_and_clock_and_matrix_doubles_it(hw_id: str) -> None:
    # 64 lanes a CU, one FMA each a clock: MI100 120 × 64 × 2 × 1.502 GHz = 23.07 (23.1);
    # MI210 104 × 64 × 2 × 1.7 GHz = 22.63 (22.6); an MI250 GCD the same (22.65).
    # Their matrix cores run fp32 at twice that: 46.1, 45.3, 45.25 TFLOP/s.
    hw = catalog_hardware(hw_id)
    assert hw.sm_count is not None and hw.clock_hz is not None
    vector = hw.peak(Precision.FP32)
    assert hw.sm_count * 64 * 2 * hw.clock_hz == pytest.approx(vector, rel=0.02)
    assert hw.matmul_peak(Precision.FP32) == pytest.approx(2 * vector, rel=0.01)


def test_an_mi250_gcd_is_half_the_package() -> None:
    gcd = catalog_hardware("mi250-gcd")
    # The MI250 package: 208 CUs, 128 GiB at 3.2768 TB/s, 45.3 / 90.5 / 362.1 TFLOP/s.
    assert (gcd.sm_count, gcd.memory_bytes) == (208 // 2, 128 * GIB // 2)
    assert gcd.memory_bandwidth_bytes_per_s == 3.2768e12 / 2
    assert gcd.peak(Precision.FP32) == 45.3e12 / 2
    assert gcd.matmul_peak(Precision.FP32) == 90.5e12 / 2
    assert gcd.peak(Precision.BF16) == 362.1e12 / 2
    assert "one GCD" in gcd.name


def test_matmul_peak_is_the_matrix_units_where_they_differ() -> None:
    mi100 = catalog_hardware("mi100")
    assert (mi100.peak(Precision.FP32), mi100.matmul_peak(Precision.FP32)) == (23.1e12, 46.1e12)
    assert mi100.matmul_peak(Precision.BF16) == mi100.peak(Precision.BF16) == 92.3e12
    for hw_id in catalog_ids():
        hw = catalog_hardware(hw_id)
        if hw.vendor == "nvidia":
            for precision, peak in hw.peak_flops_per_s.items():
                assert hw.matmul_peak(precision) == peak, (hw_id, precision)


def test_matrix_peaks_are_positive_and_frozen() -> None:
    mi100 = catalog_hardware("mi100")
    with pytest.raises(ConfigError, match="fp32 matrix peak must be positive"):
        dataclasses.replace(mi100, matrix_peak_flops_per_s={Precision.FP32: 0.0})
    with pytest.raises(ConfigError, match="clock_hz must be positive"):
        dataclasses.replace(mi100, clock_hz=0.0)
    with pytest.raises(TypeError):
        mi100.matrix_peak_flops_per_s[Precision.FP32] = 1.0  # type: ignore[index]


@pytest.mark.parametrize("hw_id", catalog_ids())
def test_every_gpu_has_its_process_node_cited(hw_id: str) -> None:
    # From TSMC's 16 nm FinFET (Pascal) to its 4NP (Blackwell), each from a document
    # of its own that names the process, not the entry's datasheet by default.
    hw = catalog_hardware(hw_id)
    assert hw.process_nm is not None, f"{hw_id} has no process_nm"
    assert 3 <= hw.process_nm <= 20, hw_id
    assert "process_nm" in catalog_data()["gpu"][hw_id]["sources"], hw_id
    citation = hw.source_of("process_nm")
    assert citation is not None and "process" in citation and "http" in citation, hw_id


def test_process_nodes() -> None:
    nodes = {hw_id: catalog_hardware(hw_id).process_nm for hw_id in catalog_ids()}
    assert {nodes[i] for i in ("p4", "p100-pcie-16gb")} == {16}
    assert {nodes[i] for i in ("v100-sxm2", "v100-pcie-32gb", "t4")} == {12}
    assert {nodes[i] for i in ("h100-sxm", "h200-sxm", "b200", "l4", "rtx-4090")} == {4}
    assert (nodes["a100-40gb-sxm"], nodes["rtx-3090"], nodes["mi100"]) == (7, 8, 7)
    assert (nodes["mi210"], nodes["mi250-gcd"], nodes["mi300x"]) == (6, 6, 5)
    with pytest.raises(ConfigError, match="process_nm must be positive"):
        dataclasses.replace(catalog_hardware("t4"), process_nm=0.0)


# What no citable source gives: NVIDIA publishes the B200's transistors (208 billion over
# two dies) but no die area, AMD an MI300X's transistors (153 billion over its package)
# but no die areas, and nothing for the MI100's die.
NO_TRANSISTOR_DENSITY = {"b200", "mi100", "mi300x"}


@pytest.mark.parametrize("hw_id", catalog_ids())
def test_every_gpu_has_its_transistor_density_cited(hw_id: str) -> None:
    # From 23 million per mm² (GP104, TSMC 16 nm) to 125 million (AD102, TSMC 4N): the
    # vendor's transistor count of the GPU die over its area, each of the two cited.
    hw = catalog_hardware(hw_id)
    if hw_id in NO_TRANSISTOR_DENSITY:
        assert hw.transistors_per_mm2 is None, hw_id
        assert "transistors_per_mm2" not in hw.sources, hw_id
        return
    assert hw.transistors_per_mm2 is not None, f"{hw_id} has no transistors_per_mm2"
    assert 15e6 <= hw.transistors_per_mm2 <= 200e6, hw_id
    cited = catalog_data()["gpu"][hw_id]["sources"]
    assert {"transistors", "die_area_mm2"} <= cited.keys(), hw_id
    citation = hw.source_of("transistors_per_mm2")
    assert citation is not None, hw_id
    assert "transistors" in citation and "mm²" in citation and "http" in citation, hw_id


def test_transistor_densities() -> None:
    density = {hw_id: catalog_hardware(hw_id).transistors_per_mm2 for hw_id in catalog_ids()}
    # The A100 whitepaper's GA100: 54.2 billion transistors on 826 mm².
    assert density["a100-40gb-sxm"] == 54.2e9 / 826
    assert {density[i] for i in ("a100-80gb-sxm", "a100-40gb-pcie", "a100-80gb-pcie")} == {
        54.2e9 / 826
    }
    assert density["h100-sxm"] == density["h200-sxm"] == 80e9 / 814
    assert density["v100-sxm2"] == density["v100-pcie-32gb"] == 21.1e9 / 815
    assert density["mi210"] == density["mi250-gcd"]
    # A die area of a secondary source says so in the citation.
    assert "secondary source" in (catalog_hardware("mi210").source_of("transistors_per_mm2") or "")
    # Denser on each newer process: 16 and 12 nm, then 8 (Samsung), 7, 4.
    assert density["p4"] < density["rtx-3090"] < density["a100-40gb-sxm"] < density["h100-sxm"]
    with pytest.raises(ConfigError, match="transistors_per_mm2 must be positive"):
        dataclasses.replace(catalog_hardware("t4"), transistors_per_mm2=0.0)


@pytest.mark.parametrize("hw_id", REQUIRED_IDS)
def test_every_number_has_a_source(hw_id: str) -> None:
    hw = catalog_hardware(hw_id)
    numeric = [f.name for f in dataclasses.fields(hw) if f.name not in ("id", "name", "kind")]
    for field in numeric:
        assert hw.source_of(field), f"{hw_id}.{field} has no source"
    assert "http" in hw.sources["*"]


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA H200", "h200-sxm"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2"),
        ("Tesla P4", "p4"),
        ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
        ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
        ("Tesla V100-PCIE-16GB", "v100-pcie-32gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb-pcie"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA A100-PG509-200", "a100-40gb-sxm"),
        ("NVIDIA B200", "b200"),
        ("AMD Instinct MI100", "mi100"),
        ("AMD Instinct MI210", "mi210"),
        ("AMD Instinct MI250", "mi250-gcd"),
        ("AMD Instinct MI250X", "mi250-gcd"),
        ("AMD Instinct MI250X / MI250", "mi250-gcd"),
        ("AMD Instinct MI300X", "mi300x"),
        # Other variants have other ceilings and must not borrow an SXM entry's.
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA GeForce RTX 3090 Ti", None),
        ("NVIDIA H200 NVL", None),
        ("Tesla P40", None),
        # A generic name without SM count and memory says nothing.
        ("AMD Radeon Graphics", None),
    ],
)
def test_device_name_mapping(reported: str, expected: str | None) -> None:
    assert catalog_id_for_device_name(reported) == expected


@pytest.mark.parametrize(
    ("name", "sm_count", "memory_bytes", "expected"),
    [
        # The name decides, and a generic name with no SM count or memory maps nowhere.
        ("NVIDIA A100-SXM4-80GB", 108, 84_990_623_744, "a100-80gb-sxm"),
        ("NVIDIA A100-SXM4-80GB", None, None, "a100-80gb-sxm"),
        # A named model with another SM count is a cut-down part or a partition of it:
        # an MI250X GCD has 110 CUs, not 104; an MI300X in CPX mode shows 38.
        ("AMD Instinct MI250X", 110, 64 * GIB, None),
        ("AMD Instinct MI300X", 38, 24 * GIB, None),
        # A name no entry matches: the one entry of that SM count and memory, as a device
        # reports it (a little under the datasheet's GiB).
        ("AMD Radeon Graphics", 304, 206_141_652_992, "mi300x"),
        ("AMD Radeon Graphics", 120, 32 * GIB - 2**26, "mi100"),
        ("GPU", 148, 191_503_138_816, "b200"),
        # 104 CUs and 64 GiB: an MI210 and an MI250 GCD alike; ROCm's generic name is the
        # GCD's (generic_names), any other name is neither.
        ("AMD Radeon Graphics", 104, 68_702_699_520, "mi250-gcd"),
        ("GPU", 104, 68_702_699_520, None),
        # 108 SMs and 40 GiB: the A100 40GB SXM4 and PCIe alike, and no generic name.
        ("GPU", 108, 42_297_524_224, None),
        # Memory more than 6 % off (28 GiB is no MI100's 32), or no entry of such SMs.
        ("GPU", 120, 28 * GIB, None),
        ("GPU", 7, 8 * GIB, None),
        ("GPU", 120, None, None),
    ],
)
def test_device_mapping_by_sm_count_and_memory(
    name: str, sm_count: int | None, memory_bytes: int | None, expected: str | None
) -> None:
    assert catalog_id_for_device(name, sm_count, memory_bytes) == expected


def test_unknown_id_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        catalog_hardware("a100")
    assert "a100-80gb-sxm" in str(info.value) or "a100-40gb-sxm" in str(info.value)
    assert "lightspeed hw list" in str(info.value)


@pytest.mark.parametrize("hw_id", REQUIRED_IDS)
def test_hardware_dict_round_trip(hw_id: str) -> None:
    hw = catalog_hardware(hw_id)
    assert hardware_from_dict(hardware_to_dict(hw)) == hw


def test_hardware_is_frozen() -> None:
    hw = catalog_hardware("l4")
    with pytest.raises(TypeError):
        hw.peak_flops_per_s[Precision.FP32] = 1.0  # type: ignore[index]


def test_showing_a_catalog_entry_never_imports_torch() -> None:
    # Reading the catalog measures nothing: `hw show ID` answers in a fraction of the
    # 2 s importing torch takes. main() ends with SystemExit, so the check runs at exit.
    program = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules))\n"
        "from lightspeed.cli import main\n"
        "main(['hw', 'show', 'h100-sxm', '--json', '-'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("torch imported: False")
