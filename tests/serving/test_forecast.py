"""ℓ(b) predicted on other hardware and in lower precision (`serve-profile
--predict-hardware/--predict-dtype`): the forward profiled as a step, carried over by the
what-ifs a training step gets, and planned with by `serve-plan`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import FAKE_CPU, RunCli
from lightspeed.facts.records import Phase
from lightspeed.facts.serving import LatencyForecast, LatencyProfile
from lightspeed.hardware.catalog import catalog_hardware
from lightspeed.measure.profile_run import profile_workload
from lightspeed.measure.step import StepSettings
from lightspeed.measure.timer import TimerConfig
from lightspeed.report.render_json import dumps, render
from lightspeed.report.serving_report import latency_document, latency_from_data
from lightspeed.suite import get
from lightspeed.workflows.latency import forecast_latency, latency_by_batch
from lightspeed.workload.inference import inference_step

GPU = "a100-40gb-sxm"


@pytest.fixture(scope="module")
def measured() -> LatencyProfile:
    return latency_by_batch(get("mlp-tiny"), [1, 8], hardware=FAKE_CPU, budget_s=0.01)


@pytest.fixture(scope="module")
def forecast(measured: LatencyProfile) -> LatencyForecast:
    return forecast_latency(
        get("mlp-tiny"),
        measured,
        hardware=FAKE_CPU,
        settings=StepSettings(),
        target=catalog_hardware(GPU),
        budget_s=0.02,
    )


def test_the_forward_as_a_step_is_the_forward_serve_profile_counts(
    measured: LatencyProfile,
) -> None:
    step = inference_step(get("mlp-tiny")).with_batch_size(8)
    profiled = profile_workload(
        step, FAKE_CPU, StepSettings(), timer=TimerConfig(budget_s=0.01, min_replicates=1)
    )
    assert profiled.workload.name == "mlp-tiny+inference"
    assert {op.phase for op in profiled.ops} == {Phase.FORWARD}  # no backward, no update
    at_8 = measured.at(8)
    assert at_8 is not None and sum(op.flops for op in profiled.ops) == at_8.flops
    assert profiled.memory is not None and profiled.memory.gradients_bytes == 0


def test_each_call_is_scaled_and_no_batch_beats_the_targets_speed_of_light(
    measured: LatencyProfile, forecast: LatencyForecast
) -> None:
    predicted = forecast.latency
    assert (predicted.hardware_id, predicted.device) == (GPU, "cuda")
    assert predicted.predicted_from == FAKE_CPU.id
    assert forecast.prediction.changes == {"hardware": GPU}
    assert forecast.prediction.carried[-1].kind == "step"
    for before, after, scale in zip(
        measured.batches, predicted.batches, forecast.scales, strict=True
    ):
        assert after.latencies_s == pytest.approx([t * scale for t in before.latencies_s])
        assert after.flops == before.flops  # the same forward, on other hardware
        assert after.sol_time_s is not None and 0 < after.sol_time_s <= after.median_s


def test_the_forecast_round_trips_and_serve_plan_plans_with_it(
    forecast: LatencyForecast, measured: LatencyProfile, run_cli: RunCli, tmp_path: Path
) -> None:
    data = json.loads(dumps(render(latency_document(measured, FAKE_CPU, forecast))))
    assert latency_from_data(data["predicted"]["latency"]) == forecast.latency
    assert latency_from_data(data["latency"]) == measured
    (tmp_path / "mlp.json").write_text(json.dumps(data))
    sessions = tmp_path / "sessions.toml"
    sessions.write_text(
        '[[session]]\nname = "mlp"\nlatency = "mlp.json"\nrate = 100\nslo_ms = 50\n'
        'target = "mlp-tiny"\n'
    )
    code, printed, err = run_cli("serve-plan", str(sessions), "--simulate", "1")
    assert code == 0, err
    assert f"predicted for {GPU} from {FAKE_CPU.id} (mlp)" in " ".join(printed.split())
    code, _, err = run_cli("serve-plan", str(sessions), "--run", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "plans with a latency predicted for other hardware" in err


def test_cli_predicts_bf16_and_refuses_what_it_cannot_predict(
    run_cli: RunCli, tmp_path: Path, calibrated_cpu: object
) -> None:
    out = tmp_path / "bf16.json"
    html = tmp_path / "bf16.html"
    common = ("serve-profile", "mlp-tiny", "--hardware", "local", "--batch-sizes", "2")
    code, printed, err = run_cli(
        *common,
        "--budget",
        "0.02",
        "--predict-dtype",
        "bf16",
        "--json",
        str(out),
        "--html",
        str(html),
    )
    assert code == 0, err
    assert "Predicted latency on local" in printed
    predicted = json.loads(out.read_text())["predicted"]
    assert predicted["prediction"]["changes"] == {"dtype": "bf16"}
    assert predicted["latency"]["predicted_from"] == "local"
    page = html.read_text()
    assert 'data-chart="prediction"' in page and "predicted-latency" in page
    for extra, says in (
        (("--predict-dtype", "bf16-pure"), "--predict-dtype bf16-pure: a prediction changes"),
        (("--predict-hardware", "a100"), "unknown hardware 'a100'"),
        (("--dtype", "bf16", "--predict-dtype", "fp16"), "predicts the fp32 forward"),
    ):
        code, _, err = run_cli(*common, *extra)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
