"""The hardware catalog: cited datasheet numbers, lookup, the local GPU's mapping."""

from __future__ import annotations

import dataclasses

import pytest

from lightspeed.dtypes import Precision
from lightspeed.errors import UnknownNameError
from lightspeed.facts.hardware import hardware_from_dict, hardware_to_dict
from lightspeed.hardware import catalog_hardware, catalog_id_for_device_name, catalog_ids

REQUIRED_IDS = [
    "v100-sxm2",
    "a100-40gb-sxm",
    "a100-80gb-sxm",
    "h100-sxm",
    "h200-sxm",
    "l4",
    "t4",
    "rtx-4090",
    "rtx-3090",
]


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
    assert Precision.BF16 not in catalog_hardware("v100-sxm2").peak_flops_per_s
    assert Precision.BF16 not in catalog_hardware("t4").peak_flops_per_s
    assert Precision.FP8 not in catalog_hardware("a100-40gb-sxm").peak_flops_per_s


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
        # Other variants have other ceilings and must not borrow an SXM entry's.
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA A100 80GB PCIe", None),
        ("NVIDIA GeForce RTX 3090 Ti", None),
        ("NVIDIA H200 NVL", None),
    ],
)
def test_device_name_mapping(reported: str, expected: str | None) -> None:
    assert catalog_id_for_device_name(reported) == expected


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
