"""Results logged to W&B (offline), MLflow (a file store) and TensorBoard, each read back
with that library's own reader: the figures are the report's, the files are kept."""

from __future__ import annotations

import glob
import json
import statistics
import struct
from pathlib import Path
from typing import Any

import pytest
from html_results import bench_run, tiny_profile, trace_result

from lightspeed.errors import ConfigError
from lightspeed.integrations.sinks import log_result, open_sinks, result_metrics

TRACES = Path(__file__).parents[1] / "data" / "traces"
TRACE = TRACES / "hta-v100-ddp-cnn-train-rank0.json.gz"


def test_a_trace_s_figures_are_its_report_s() -> None:
    result = trace_result(TRACE)
    (rank,) = result["ranks"]
    figures = result_metrics(result)
    assert figures["lightspeed/step_time_s"] == statistics.median(
        s["step_s"] for s in rank["steps"]
    )
    assert figures["lightspeed/steps_recorded"] == len(rank["steps"]) == 5
    assert figures["lightspeed/bound"] == "compute"
    t = rank["temporal_breakdown"]
    assert figures["lightspeed/device_busy_fraction"] == 1 - t["idle_s"] / t["total_s"]


def test_a_profile_s_and_a_bench_run_s_figures_are_their_reports() -> None:
    profile = tiny_profile()
    figures = result_metrics(profile)
    assert figures == {
        "lightspeed/step_time_s": profile["totals"]["step_time_s"],
        "lightspeed/fraction_of_sol": profile["totals"]["efficiency"],
        "lightspeed/mfu": profile["totals"]["mfu"],
        "lightspeed/peak_memory_bytes": profile["memory"]["peak_bytes"],
        "lightspeed/bound": profile["bound"],
    }
    name = profile["workload"]["name"]
    bench = result_metrics(bench_run(profile))
    assert bench == {k.replace("lightspeed/", f"lightspeed/{name}/"): v for k, v in figures.items()}


def _wandb_history(run_file: Path) -> list[dict[str, Any]]:
    """The history rows of a W&B offline run file: its records (W&B's protobuf `Record`)
    framed as LevelDB's log is (a 7-byte header, 32 KiB blocks, each piece with a CRC,
    a length and a type: whole, first, middle, last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    pos, pieces, rows = 7, b"", []
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # the block's tail is padding
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pieces = chunk if kind in (1, 2) else pieces + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pieces)
            if record.WhichOneof("record_type") == "history":
                items = record.history.item
                rows.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
    return rows


def test_each_sink_keeps_the_figures_and_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    for name in ("WANDB_MODE", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    result = trace_result(TRACE)
    files = [tmp_path / "t.json", tmp_path / "t.html"]
    for path in files:
        path.write_text("{}")
    sinks = open_sinks("wandb,mlflow,tensorboard", tmp_path / "logs", run_name="run")
    try:
        figures = log_result(sinks, result, files, step=7)
    finally:
        for sink in sinks:
            sink.close()
    numbers = {k: v for k, v in figures.items() if not isinstance(v, str)}

    (run_dir,) = glob.glob(str(tmp_path / "logs" / "wandb" / "offline-run-*"))
    (row,) = _wandb_history(next(Path(run_dir).glob("run-*.wandb")))
    assert row["_step"] == 7 and {k: row[k] for k in figures} == figures
    assert {"t.json", "t.html"} <= {p.name for p in (Path(run_dir) / "files").iterdir()}

    from mlflow.tracking import MlflowClient

    client = MlflowClient((tmp_path / "logs" / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("lightspeed").experiment_id])
    assert run.data.metrics == numbers and run.data.tags["lightspeed/bound"] == "compute"
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"t.json", "t.html"}

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "logs" / "tensorboard" / "run"))
    events.Reload()
    assert {k: events.Scalars(k)[0].value for k in numbers} == pytest.approx(numbers, rel=1e-6)
    assert {events.Scalars(k)[0].step for k in numbers} == {7}
    assert (tmp_path / "logs" / "tensorboard" / "run" / "t.json").exists()


def test_an_unknown_sink_is_refused_with_the_ones_there_are(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="choose from wandb, mlflow, tensorboard"):
        open_sinks("wandb,neptune", tmp_path)
    # A training run's callback refuses it before the first step, not after the last.
    from lightspeed.integrations import ProfiledRun

    with pytest.raises(ConfigError, match="choose from"):
        ProfiledRun(tmp_path, log="neptune")
    # The framework callbacks refuse it, and a schedule that records nothing, as they
    # are made (they make their run only when training starts).
    from lightspeed.integrations.run import run_settings

    with pytest.raises(ConfigError, match="choose from"):
        run_settings(1, 1, 3, "neptune")
    with pytest.raises(ConfigError, match="active must be at least 1"):
        run_settings(1, 1, 0, None)
    transformers = pytest.importorskip("lightspeed.integrations.transformers")
    with pytest.raises(ConfigError, match="choose from"):
        transformers.LightspeedCallback(tmp_path, log="neptune")


def test_trace_log_writes_to_tensorboard(run_cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    code, _, err = run_cli("trace", str(TRACE), "--log", "tensorboard", "--log-dir", str(tmp_path))
    assert code == 0, err
    assert "logged to tensorboard" in err
    folder = tmp_path / "tensorboard" / "lightspeed"
    assert list(folder.glob("events.out.tfevents.*"))
    assert {p.name for p in folder.glob("trace-analysis.*")} == {
        "trace-analysis.json",
        "trace-analysis.html",
    }
    code, _, err = run_cli("trace", str(TRACE), "--log", "neptune")
    assert code == 2 and err.count("\n") == 1 and "choose from" in err


def test_a_gpu_trace_s_flops_and_mfu_are_its_products_on_its_gpu() -> None:
    from html_results import ONE_WITH_MATMULS

    result = trace_result(ONE_WITH_MATMULS)
    (rank,) = result["ranks"]
    (step,) = rank["steps"]
    figures = result_metrics(result)
    assert figures["lightspeed/flops_per_step"] == step["matmuls"]["flops"] == 8_029_194_240
    # Its products ran in bf16 on an H100 SXM: 989.4 TFLOP/s dense, the datasheet's.
    assert rank["matmuls"]["by_precision"].keys() == {"bf16"}
    assert rank["matmuls"]["hardware_ceilings"]["peak_flops_per_s"]["bf16"] == 989.4e12
    assert figures["lightspeed/mfu"] == 8_029_194_240 / step["step_s"] / 989.4e12
    assert 0 < figures["lightspeed/mfu"] < 1
