"""The `lightspeed` command as a user meets it: output, JSON, exit status 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from factories import RunCli
from lightspeed.facts.hardware import Hardware

DATA = Path(__file__).parent / "data" / "workloads.py"


def test_hw_show_json_keys(run_cli: RunCli) -> None:
    code, out, _ = run_cli("hw", "show", "a100-80gb-sxm", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema_version"] == 4
    assert doc["peak_flops_per_s"]["bf16"] == 312e12
    assert doc["memory_bandwidth_bytes_per_s"] == 2.039e12
    assert doc["kind"] == "gpu"
    assert doc["memory_bytes"] == 80 * 2**30


def test_hw_list_names_every_id(run_cli: RunCli) -> None:
    code, out, _ = run_cli("hw", "list")
    assert code == 0
    for hw_id in ("v100-sxm2", "h100-sxm", "rtx-3090"):
        assert hw_id in out


def test_roofline_json_worked_example(run_cli: RunCli) -> None:
    code, out, _ = run_cli(
        "roofline",
        "--flops",
        "1048576",
        "--bytes",
        "2103296",
        "--peak-flops",
        "6e12",
        "--bandwidth",
        "300e9",
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["bound"] == "memory"
    assert doc["sol_time_s"] == pytest.approx(7.011e-6, rel=1e-3)
    assert doc["attainable_flops_per_s"] == pytest.approx(149.6e9, rel=1e-3)
    assert doc["ridge_flops_per_byte"] == pytest.approx(20.0)
    assert doc["intensity_flops_per_byte"] == pytest.approx(0.4985, rel=1e-3)


def test_roofline_on_catalog_hardware(run_cli: RunCli) -> None:
    # 512³ GEMM in bf16 on an H100: intensity 2·512³ / (4·512²·2 B) = 128,
    # below the ridge point 989.4e12 / 3.35e12 ≈ 295
    code, out, _ = run_cli(
        "roofline",
        "--flops",
        str(2 * 512**3),
        "--bytes",
        str(4 * 512**2 * 2),
        "--hardware",
        "h100-sxm",
        "--dtype",
        "bf16",
        "--json",
    )
    doc = json.loads(out)
    assert (code, doc["bound"], doc["hardware"]) == (0, "memory", "h100-sxm")
    assert doc["intensity_flops_per_byte"] == 128.0


def test_time_reports_and_writes_json(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    out_path = tmp_path / "timing.json"
    code, out, _ = run_cli(
        "time",
        "mlp-tiny",
        "--budget",
        "0.2",
        "--warmup",
        "1",
        "--batch-size",
        "8",
        "--json",
        str(out_path),
    )
    assert code == 0
    assert "Step timing" in out and "samples/s" in out and "test CPU" in out
    doc = json.loads(out_path.read_text())
    assert doc["workload"] == {
        "name": "mlp-tiny",
        "batch_size": 8,
        "dtype": "fp32",
        "device": "cpu",
        "parameter_count": 64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10,
        "tokens_per_sample": None,
        "parameter_tensors": 6,  # three Linears' weights and biases
        "target": "mlp-tiny",  # what loads it again
        "jobs": 1,
        "mixed": False,
    }
    timing = doc["timing"]
    assert timing["replicates"] == len(timing["times_s"]) >= 5
    assert timing["samples_per_s"] == pytest.approx(
        8 / (sum(timing["times_s"]) / len(timing["times_s"])), rel=1e-9
    )
    assert doc["hardware"]["name"] == "test CPU"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hw", "show", "h100"], "unknown hardware 'h100'. Did you mean 'h100-sxm'"),
        (["time", "no/such/file.py:wl"], "no such file"),
        (["time", f"{DATA}:missing"], "has no attribute 'missing'"),
        (["time", f"{DATA}:not_a_workload"], "not a lightspeed.Workload"),
        (["time", f"{DATA}:broken_model"], "model() raised ValueError"),
        (["time", f"{DATA}:broken_loss", "--hardware", "t4"], "loss(model, batch) raised KeyError"),
        (["time", "resnet"], "neither a suite workload"),
        (["time", "mlp", "--dtype", "fp8"], "cannot run a training step"),
        (["time", "mlp", "--device", "tpu"], "--device 'tpu' is not a device"),
        (["roofline", "--flops", "1", "--bytes", "1"], "give the ceilings"),
        (
            ["roofline", "--flops", "1", "--bytes", "1", "--hardware", "t4", "--dtype", "bf16"],
            "no bf16 peak",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    run_cli: RunCli, calibrated_cpu: Hardware, args: list[str], message: str
) -> None:
    code, _, err = run_cli(*args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lightspeed: error: ")
    assert message in lines[0]
    assert "Traceback" not in err


def test_debug_shows_the_traceback(run_cli: RunCli, calibrated_cpu: Hardware) -> None:
    code, _, err = run_cli("time", f"{DATA}:broken_model", "--debug")
    assert code == 2
    assert "Traceback" in err and "ValueError: no such layer size" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize(
    "command",
    [
        ("time", "mlp-tiny", "--device", "cuda"),
        ("time", "mlp-tiny", "--device", "cuda", "--hardware", "local"),
        ("hw", "show", "local", "--device", "cuda"),
        ("hw", "calibrate", "--device", "cuda"),
    ],
)
def test_cuda_without_a_gpu(run_cli: RunCli, command: tuple[str, ...]) -> None:
    code, _, err = run_cli(*command)
    assert code == 2
    assert "--device cuda: PyTorch sees no CUDA GPU" in err
    assert len(err.strip().splitlines()) == 1
