"""`lightspeed profile` end to end on tiny workloads, and what survives a failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factories import RunCli
from lightspeed.facts.hardware import Hardware
from lightspeed.report.profile_json import profile_from_doc

DATA = Path(__file__).parent / "data" / "workloads.py"


def test_profile_mlp_tiny_report_and_json(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    path = tmp_path / "profile.json"
    code, out, err = run_cli("profile", "mlp-tiny", "--budget", "0.2", "--json", str(path))
    assert code == 0, err
    for section in ("Speed of light", "Phases", "Modules", "Top 10 ops", "Memory", "Findings"):
        assert section in out
    doc = json.loads(path.read_text())
    assert doc["workload"]["name"] == "mlp-tiny"
    assert doc["hardware"]["name"] == "test CPU"
    # mlp-tiny: Linear(64→128), Linear(128→128), Linear(128→10) on batch 32.
    # Forward matmuls: 2·32·(64·128 + 128·128 + 128·10) = 1,654,784 FLOPs.
    forward_mm = sum(
        o["flops"] for o in doc["ops"] if o["phase"] == "forward" and o["name"] == "aten::addmm"
    )
    assert forward_mm == 2 * 32 * (64 * 128 + 128 * 128 + 128 * 10)
    params = doc["workload"]["parameter_count"]
    assert doc["memory"]["parameters_bytes"] == 4 * params
    assert doc["memory"]["gradients_bytes"] == 4 * params
    assert doc["totals"]["sol_time_s"] == pytest.approx(sum(o["sol_time_s"] for o in doc["ops"]))
    assert profile_from_doc(doc).workload.name == "mlp-tiny"


def test_a_failing_workload_still_writes_what_was_measured(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    path, html, png = tmp_path / "partial.json", tmp_path / "partial.html", tmp_path / "r.png"
    code, _, err = run_cli(
        "profile",
        f"{DATA}:out_of_memory",
        "--json",
        str(path),
        "--html",
        str(html),
        "--png",
        str(png),
    )
    assert code == 2
    assert err.splitlines()[-1].startswith("lightspeed: error: ")
    assert "try a smaller --batch-size" in err.splitlines()[-1]
    doc = json.loads(path.read_text())
    assert doc["workload"]["name"] == "oom"
    assert "ran out of" in doc["failure"]
    assert doc["timing"] is None and doc["ops"] == []
    # The report of what there is: the failure, no op; no roofline to draw.
    assert "ran out of" in html.read_text()
    assert (
        "not written: nothing in the result has FLOPs, bytes and a time" in err and not png.exists()
    )


def test_failure_after_timing_keeps_the_timing(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    path = tmp_path / "partial.json"
    code, _, err = run_cli(
        "profile", f"{DATA}:fails_on_fifth_step", "--budget", "0.1", "--json", str(path)
    )
    assert code == 2
    assert "fails under observation" in err
    doc = json.loads(path.read_text())
    # Timing finished before capture failed: it is kept; no op was captured.
    assert "fails under observation" in doc["failure"]
    assert doc["timing"]["replicates"] >= 4  # api.PROFILE_MIN_REPLICATES
    assert doc["ops"] == []


def test_quick_times_briefly_and_profiles_one_step(
    run_cli: RunCli, calibrated_cpu: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightspeed.measure import profile_run

    asked: list[int] = []
    real = profile_run.profile_op_times

    def profile_op_times(*args: object, steps: int = 1, **kwargs: object) -> object:
        asked.append(steps)
        return real(*args, steps=steps, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(profile_run, "profile_op_times", profile_op_times)
    code, out, _ = run_cli("profile", "mlp-tiny", "--quick", "--json")
    assert code == 0
    timing = json.loads(out)["timing"]
    # The 0.5 s budget (not the default 2 s), and one profiled step.
    assert sum(timing["times_s"]) * timing["steps_per_replicate"] < 1.0
    assert asked == [1]


def _products(doc: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    return [o for o in doc["ops"] if o["phase"] == phase and o["name"] == "aten::addmm"]


@pytest.mark.parametrize("shape_only", [False, True])
def test_dtype_bf16_is_autocast_with_fp32_parameters(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path, shape_only: bool
) -> None:
    path, html = tmp_path / "bf16.json", tmp_path / "bf16.html"
    how = ["--shape-only"] if shape_only else ["--quick", "--budget", "0.1"]
    code, out, err = run_cli(
        "profile", "mlp-tiny", "--dtype", "bf16", *how, "--json", str(path), "--html", str(html)
    )
    assert code == 0, err
    assert "mlp-tiny: batch 32, bf16 autocast on cpu" in out
    assert "bf16 autocast" in html.read_text()
    doc = json.loads(path.read_text())
    assert (doc["workload"]["dtype"], doc["workload"]["mixed"]) == ("bf16", True)
    # Master weights, their gradients and the batch stay fp32 (4 bytes each) ...
    params = doc["workload"]["parameter_count"]
    assert doc["memory"]["parameters_bytes"] == doc["memory"]["gradients_bytes"] == 4 * params
    assert doc["memory"]["inputs_bytes"] == 4 * 32 * 64 + 8 * 32  # fp32 x, int64 labels
    # ... while autocast runs each Linear's addmm on bf16 copies of x, W and b.
    forward = _products(doc, "forward")
    assert len(forward) == 3
    assert all(o["input_dtypes"] == ["bfloat16"] * 3 for o in forward)
    assert profile_from_doc(doc).workload.mixed


def test_dtype_bf16_pure_casts_the_model_and_batch(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    path = tmp_path / "pure.json"
    code, out, err = run_cli(
        "profile", "mlp-tiny", "--dtype", "bf16-pure", "--shape-only", "--json", str(path)
    )
    assert code == 0, err
    assert "mlp-tiny: batch 32, bf16 pure on cpu" in out
    doc = json.loads(path.read_text())
    assert (doc["workload"]["dtype"], doc["workload"]["mixed"]) == ("bf16", False)
    params = doc["workload"]["parameter_count"]
    assert doc["memory"]["parameters_bytes"] == 2 * params
    assert doc["memory"]["inputs_bytes"] == 2 * 32 * 64 + 8 * 32  # bf16 x, int64 labels
    assert not profile_from_doc(doc).workload.mixed
