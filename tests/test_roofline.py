"""The roofline: the lecture's worked examples, exactly, and its invariants."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factories import hand_built_profile, op
from lightspeed.analysis.roofline import Bound, Ceilings, place
from lightspeed.analysis.step_roofline import analyse_op, analyse_ops, step_totals
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.hardware import catalog_hardware, catalog_ids

LECTURE = Ceilings(peak_flops_per_s=6e12, bandwidth_bytes_per_s=300e9)


def test_matrix_vector_is_memory_bound() -> None:
    # y = A·x with A of M=1024 × N=512 in fp32:
    # FLOPs = 2·M·N = 2·1024·512 = 1,048,576
    # bytes = 4·(M·N + N + M) = 4·(524,288 + 512 + 1,024) = 2,103,296 (read A, x; write y)
    point = place(1_048_576, 2_103_296, LECTURE)
    assert point.intensity_flops_per_byte == pytest.approx(1_048_576 / 2_103_296)  # ≈ 0.4985
    assert point.ridge_flops_per_byte == pytest.approx(20.0)  # 6e12 / 300e9
    assert point.bound is Bound.MEMORY
    # SoL = max(1,048,576 / 6e12, 2,103,296 / 300e9) = max(0.175 µs, 7.0110 µs)
    assert point.sol_time_s == pytest.approx(2_103_296 / 300e9)
    assert point.sol_time_s == pytest.approx(7.01e-6, rel=1e-3)
    # attainable = intensity · bandwidth = 0.4985 · 300e9 ≈ 149.6 GFLOP/s
    assert point.attainable_flops_per_s == pytest.approx(149.56e9, rel=1e-3)


def test_matrix_matrix_512_is_compute_bound() -> None:
    # C ← A·B + C with n = 512 in fp32: FLOPs = 2·n³ = 268,435,456;
    # bytes = 4 matrices (read A, B, C; write C) · n² · 4 B = 4,194,304
    point = place(2 * 512**3, 4 * 512**2 * 4, LECTURE)
    assert point.intensity_flops_per_byte == 64.0  # = n / 8
    assert point.bound is Bound.COMPUTE
    assert point.attainable_flops_per_s == 6e12
    assert point.sol_time_s == pytest.approx(2 * 512**3 / 6e12)


def test_ceilings_from_catalog_use_the_precision_peak() -> None:
    a100 = catalog_hardware("a100-80gb-sxm")
    ceilings = Ceilings.of(a100, Precision.BF16)
    assert ceilings.peak_flops_per_s == 312e12
    assert ceilings.ridge_flops_per_byte == pytest.approx(312e12 / 2039e9)  # ≈ 153 FLOP/B


# A [4, 4] · [4, 4] fp32 product: 2 · 4³ = 128 FLOPs and 4³ = 64 MACs; an add of as many
# FLOPs. One byte each, so both are compute bound and their roof is the peak.
MM = op(0, 128, 1, None, macs=64)
ADD = op(1, 128, 1, None)


def test_an_fp32_matmul_on_an_mi100_is_placed_at_its_matrix_peak() -> None:
    mi100 = catalog_hardware("mi100")
    mm, add = analyse_op(MM, mi100), analyse_op(ADD, mi100)
    assert mm.point is not None and add.point is not None
    assert mm.point.ceilings.peak_flops_per_s == 46.1e12  # fp32 on the MFMA matrix cores
    assert add.point.ceilings.peak_flops_per_s == 23.1e12  # the vector units
    assert mm.sol_time_s == pytest.approx(128 / 46.1e12)
    assert mm.precision is add.precision is Precision.FP32
    # MFU and HFU of an fp32 step are taken over the matrix peak.
    profile = dataclasses.replace(hand_built_profile((MM, ADD), 0.0, 1.0), hardware=mi100)
    assert step_totals(profile, analyse_ops(profile)).peak_flops_per_s == 46.1e12


NVIDIA = [h for h in catalog_ids() if catalog_hardware(h).vendor == "nvidia"]


@pytest.mark.parametrize("hw_id", NVIDIA)
def test_on_nvidia_a_matmul_and_an_add_share_the_fp32_peak(hw_id: str) -> None:
    # NVIDIA's fp32 runs on the CUDA cores whatever the op (tensor-core fp32 is tf32).
    hw = catalog_hardware(hw_id)
    mm, add = analyse_op(MM, hw), analyse_op(ADD, hw)
    assert mm.point is not None and add.point is not None
    assert mm.point.ceilings == add.point.ceilings == Ceilings.of(hw, Precision.FP32)


def test_missing_precision_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"no bf16 peak \(known: fp64, fp32, fp16\)"):
        Ceilings.of(catalog_hardware("v100-sxm2"), Precision.BF16)


def test_no_work_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no work"):
        place(0, 0, LECTURE)


def test_efficiency_and_headroom() -> None:
    point = place(6e9, 1.0, LECTURE)  # 1 ms of compute at 6 TFLOP/s
    assert point.efficiency(4e-3) == pytest.approx(0.25)
    assert point.headroom_s(4e-3) == pytest.approx(3e-3)


work = st.floats(min_value=1.0, max_value=1e18, allow_nan=False)
rates = st.floats(min_value=1e6, max_value=1e16, allow_nan=False)


@given(flops=work, bytes_moved=work, peak=rates, bandwidth=rates)
def test_roofline_invariants(
    flops: float, bytes_moved: float, peak: float, bandwidth: float
) -> None:
    point = place(
        flops, bytes_moved, Ceilings(peak_flops_per_s=peak, bandwidth_bytes_per_s=bandwidth)
    )
    # SoL is no faster than either roof alone and equals the slower one.
    assert point.sol_time_s >= point.compute_time_s
    assert point.sol_time_s >= point.memory_time_s
    assert point.attainable_flops_per_s <= peak * (1 + 1e-12)
    # Doing the work at the attainable rate takes exactly the SoL time.
    assert flops / point.attainable_flops_per_s == pytest.approx(point.sol_time_s, rel=1e-9)
    expected = Bound.COMPUTE if flops / bytes_moved >= peak / bandwidth else Bound.MEMORY
    assert point.bound is expected
    assert math.isfinite(point.sol_time_s)
