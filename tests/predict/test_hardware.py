"""A profile predicted on other hardware: exact arithmetic on hand-built profiles, the
identity onto the same hardware, and the prediction carried through JSON and the CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import FAKE_CPU, HAND_BUILT, RunCli, examples, hand_built_profile, op
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind
from lightspeed.hardware import catalog_hardware
from lightspeed.predict.hardware import (
    REFERENCE_DENSITY,
    SUSTAINED,
    SustainedRates,
    carry_time,
    sustained_hardware,
)
from lightspeed.predict.whatif import predict
from lightspeed.report.profile_json import load_profile, save_profile

DATA = Path(__file__).parent.parent / "data"
# FAKE_CPU: fp32 100 GFLOP/s, 20 GB/s. This one: 4× the math, 2× the bandwidth.
FASTER = dataclasses.replace(
    FAKE_CPU,
    id="faster",
    name="faster CPU",
    peak_flops_per_s={Precision.FP32: 400e9},
    memory_bandwidth_bytes_per_s=40e9,
    calibration=None,
)


def test_each_op_keeps_its_fraction_of_the_speed_of_light() -> None:
    predicted = predict(HAND_BUILT, hardware=FASTER)
    times = [o.time_s for o in predicted.ops]
    # compute: SoL 2e9 / 400e9 = 5 ms at 50 %: 10 ms; memory: 2e8 / 40e9 = 5 ms at 50 %:
    # 10 ms; overhead, no work, untimed: kept.
    assert times == pytest.approx([0.010, 0.010, 10e-6, 5e-6, None])
    # Step: the median of 70 and 77 ms, 73.5 ms, × (10 + 10 + 0.01 + 0.005 + 5 outside)
    # / (40 + 20 + 0.01 + 0.005 + 5).
    scale = (0.010 + 0.010 + 10e-6 + 5e-6 + 0.005) / (0.040 + 0.020 + 10e-6 + 5e-6 + 0.005)
    assert predicted.step_time_s == pytest.approx(0.0735 * scale)
    assert predicted.profiled_step_s == pytest.approx(0.010 + 0.010 + 10e-6 + 5e-6 + 0.005)
    assert predicted.unattributed_s == HAND_BUILT.unattributed_s
    assert predicted.memory == HAND_BUILT.memory and predicted.hardware is FASTER
    made = predicted.prediction
    assert made is not None and dict(made.changes) == {"hardware": "faster"}
    assert (made.source_hardware, made.measured_step_time_s) == ("local", HAND_BUILT.step_time_s)


def test_an_op_that_crosses_the_ridge_takes_its_bound_on_the_target() -> None:
    # Intensity 10 FLOP/B: above FAKE_CPU's ridge (5), below FASTER's (10 is its ridge,
    # so compute); on a target of 400 GFLOP/s and 20 GB/s (ridge 20) it is memory-bound.
    slow_memory = dataclasses.replace(FASTER, memory_bandwidth_bytes_per_s=20e9)
    crossing = hand_built_profile((op(0, 1_000_000_000, 100_000_000, 0.020, macs=1),), 0.0, 0.020)
    # Source SoL: max(10 ms, 5 ms) = 10 ms (50 %); target: max(2.5 ms, 5 ms) = 5 ms.
    (moved,) = predict(crossing, hardware=slow_memory).ops
    assert moved.time_s == pytest.approx(0.010)


def test_no_change_is_the_identity() -> None:
    assert predict(HAND_BUILT) is HAND_BUILT


@settings(max_examples=examples(40), deadline=None)
@given(
    work=st.lists(
        st.tuples(
            st.integers(0, 10**12),
            st.integers(0, 10**10),
            st.one_of(st.none(), st.floats(1e-7, 10.0)),
        ),
        min_size=1,
        max_size=12,
    ),
    outside=st.floats(0.0, 1.0),
)
def test_the_same_hardware_predicts_the_same_figures(
    work: list[tuple[int, int, float | None]], outside: float
) -> None:
    measured = hand_built_profile(
        tuple(op(i, f, b, t, macs=f // 2 or None) for i, (f, b, t) in enumerate(work)),
        outside,
        1.0,
    )
    same = predict(measured, hardware=measured.hardware)
    assert [o.time_s for o in same.ops] == [o.time_s for o in measured.ops]
    assert same.timing == measured.timing
    assert same.profiled_step_s == pytest.approx(measured.profiled_step_s, rel=1e-12)


def test_a_gpu_target_says_what_is_not_validated() -> None:
    small = dataclasses.replace(catalog_hardware("h100-sxm"), memory_bytes=10)
    with_memory = load_profile(DATA / "profiles" / "mlp-tiny-schema1.json")
    predicted = predict(with_memory, hardware=small)
    assert predicted.workload.device is Device.CUDA
    assert small.kind is DeviceKind.GPU
    made = predicted.prediction
    assert made is not None and not made.validated
    said = " ".join(made.assumptions)
    assert "from a cpu to a gpu" in said
    assert "exceeds the target's 10 B: it would not run there as it is" in said


def test_a_prediction_round_trips_through_json(tmp_path: Path) -> None:
    predicted = predict(HAND_BUILT, hardware=FASTER)
    loaded = load_profile(save_profile(predicted, tmp_path / "p.json"))
    assert loaded.prediction == predicted.prediction
    assert [o.time_s for o in loaded.ops] == [o.time_s for o in predicted.ops]


def test_the_cli_predicts_from_a_saved_profile(run_cli: RunCli, tmp_path: Path) -> None:
    saved = str(DATA / "profiles" / "mlp-tiny-schema1.json")
    code, out, _ = run_cli("predict", saved, "--hardware", "h100-sxm", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["prediction"]["changes"] == {"hardware": "h100-sxm"}
    assert doc["hardware"]["id"] == "h100-sxm" and doc["workload"]["device"] == "cuda"
    measured = load_profile(saved)
    assert doc["prediction"]["measured_step_time_s"] == measured.step_time_s
    code, _, err = run_cli("predict", saved, "--hardware", "h100")
    assert code == 2 and "h100-sxm" in err  # the closest id offered


def test_predicting_needs_a_known_hardware_and_a_readable_profile(
    run_cli: RunCli, tmp_path: Path
) -> None:
    code, _, err = run_cli("predict", str(tmp_path / "none.json"), "--hardware", "h100-sxm")
    assert code == 2 and "no such file" in err


def test_a_gpu_sustains_its_fp32_vector_rate_up_to_its_board_power() -> None:
    rates = SUSTAINED
    t4, v100, a100, mi100 = (
        catalog_hardware(i) for i in ("t4", "v100-pcie-32gb", "a100-40gb-pcie", "mi100")
    )
    # T4: 13.6 billion transistors on 545 mm², 25.0 million per mm², about the reference:
    # its 70 W × the FLOP a joule buys is below its 8.1 TFLOP/s. Its fp16 tensor cores
    # are only held to the share of their 65 TFLOP/s.
    shrink = math.sqrt(13.6e9 / 545 / REFERENCE_DENSITY)
    assert 70 * rates.flops_per_joule * shrink < rates.peak_share * 8.1e12
    held = sustained_hardware(t4)
    assert held.peak(Precision.FP32) == pytest.approx(70 * rates.flops_per_joule * shrink)
    assert held.peak(Precision.FP16) == pytest.approx(rates.peak_share * 65e12)
    # A100: 65.6 million per mm², so a joule buys √(65.6 / 25) = 1.62× the FLOP: its
    # 250 W cover its 19.5 TFLOP/s, held to the share.
    assert 250 * rates.flops_per_joule * math.sqrt(54.2e9 / 826 / 25e6) > 19.5e12
    assert sustained_hardware(a100).peak(Precision.FP32) == pytest.approx(
        rates.peak_share * 19.5e12
    )
    # V100 PCIe: 250 W on 25.9 million per mm².
    assert sustained_hardware(v100).peak(Precision.FP32) == pytest.approx(
        min(rates.peak_share * 14e12, 250 * rates.flops_per_joule * math.sqrt(25.89 / 25)),
        rel=1e-3,
    )
    # MI100 (no density in the catalog: the reference): the vector rate is capped at
    # 300 W, the fp32 matrix units (MFMA) are not.
    assert mi100.transistors_per_mm2 is None
    mfma = sustained_hardware(mi100)
    assert mfma.matmul_peak(Precision.FP32) == pytest.approx(rates.peak_share * 46.1e12)
    assert mfma.peak(Precision.FP32) == pytest.approx(
        min(rates.peak_share * 23.1e12, 300 * rates.flops_per_joule)
    )
    # A calibrated device's peaks are what it measured: kept.
    assert sustained_hardware(FAKE_CPU) is FAKE_CPU


def test_a_compute_bound_product_moves_by_the_sustained_rates() -> None:
    rates = SustainedRates(flops_per_joule=50e9, peak_share=0.9)
    t4, v100 = catalog_hardware("t4"), catalog_hardware("v100-pcie-32gb")
    # 1 TFLOP in 1 MB: compute bound on both. T4 sustains 70 W × 50 GFLOP/J = 3.5 TFLOP/s;
    # V100 0.9 × 14 = 12.6 TFLOP/s, under what its 250 W buy (12.5 × √(25.9 / 25) = 12.7).
    product = op(0, 10**12, 10**6, 0.5, macs=5 * 10**11)
    assert carry_time(product, t4, v100, rates) == pytest.approx(0.5 * 3.5 / 12.6, rel=1e-3)
    assert carry_time(product, v100, t4, rates) == pytest.approx(0.5 * 12.6 / 3.5, rel=1e-3)
    assert carry_time(product, t4, t4, rates) == 0.5


def test_a_product_faster_than_its_source_sustains_stays_above_the_targets_sol() -> None:
    rates = SustainedRates(flops_per_joule=50e9, peak_share=1.0)
    t4, v100 = catalog_hardware("t4"), catalog_hardware("v100-pcie-32gb")
    # 1 TFLOP in 0.2 s on the T4: 5 TFLOP/s, above the 3.5 it sustains, below its 8.1
    # peak. Carried: 0.2 × 3.5 / 12.7 = 55 ms, under the V100's 1/14 s SoL: the SoL.
    product = op(0, 10**12, 10**6, 0.2, macs=5 * 10**11)
    assert carry_time(product, t4, v100, rates) == pytest.approx(1 / 14)


def test_a_gpu_prediction_says_how_each_kind_of_op_was_carried(tmp_path: Path) -> None:
    on_gpu = dataclasses.replace(HAND_BUILT, hardware=catalog_hardware("t4"))
    predicted = predict(on_gpu, hardware=catalog_hardware("a100-40gb-pcie"))
    made = predicted.prediction
    assert made is not None and made.validated
    kinds = {c.kind: c for c in made.carried}
    assert list(kinds) == [c.kind for c in made.carried]
    assert kinds["step"].measured_s == on_gpu.step_time_s
    assert kinds["step"].predicted_s == predicted.step_time_s
    timed = [c for c in made.carried if c.kind not in ("step", "outside ops")]
    assert sum(c.ops for c in timed) == len(on_gpu.ops)
    assert sum(c.predicted_s for c in timed) == pytest.approx(
        sum(o.time_s or 0.0 for o in predicted.ops)
    )
    assert kinds["step"].validation is not None and kinds["step"].validation.pairs > 0
    loaded = load_profile(save_profile(predicted, tmp_path / "p.json"))
    assert loaded.prediction == made
    # Between AMD GPUs, the AMD pairs' figures; in bf16, none (fp32 was validated).
    on_amd = dataclasses.replace(HAND_BUILT, hardware=catalog_hardware("mi100"))
    amd = predict(on_amd, hardware=catalog_hardware("mi210")).prediction
    assert amd is not None and amd.validated
    amd_step = {c.kind: c for c in amd.carried}["step"].validation
    nvidia_step = kinds["step"].validation
    assert amd_step is not None and nvidia_step is not None and amd_step != nvidia_step
    assert "AMD_Instinct" in amd_step.data and "AMD_Instinct" not in nvidia_step.data
    in_bf16 = dataclasses.replace(
        on_gpu, workload=dataclasses.replace(on_gpu.workload, precision=Precision.BF16)
    )
    made_bf16 = predict(in_bf16, hardware=catalog_hardware("a100-40gb-pcie")).prediction
    assert made_bf16 is not None and not made_bf16.validated
    # A CPU's prediction carries the same kinds, none of them validated.
    from_cpu = predict(HAND_BUILT, hardware=catalog_hardware("t4")).prediction
    assert from_cpu is not None and not from_cpu.validated
    assert from_cpu.carried and all(c.validation is None for c in from_cpu.carried)
