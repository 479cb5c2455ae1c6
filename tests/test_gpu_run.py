"""`benchmarks/gpu_run.py`, the script a lent CUDA machine runs, dry-run on this CPU: the
same plan with the tiny workloads, each step's files packed as it ends, a step past its
timeout killed with its children and the run going on."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType

import pytest

from lightspeed.facts.hardware import Hardware
from lightspeed.trace import analyse_traces, load_traces

ROOT = Path(__file__).resolve().parents[1]


def gpu_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_run", ROOT / "benchmarks" / "gpu_run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_run"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_dry_run_packs_every_capture(tmp_path: Path, calibrated_cpu: Hardware) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_run.py"), "--out", str(out),
         "--work", str(tmp_path / "work"), "--dry-run", "--deadline", "300"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "base.tar.gz",
        "capture-fp32.tar",
        "cpu.tar.gz",
        "whatif.tar",
    ]
    unpacked = tmp_path / "unpacked"
    for archive in out.iterdir():
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
    steps = json.loads((unpacked / "steps.json").read_text())
    assert [s["name"] for s in steps] == [
        "env", "tests", "capture-mlp-tiny-fp32", "whatif", "cpu-mlp-tiny"
    ]  # fmt: skip
    assert all(s["returncode"] == 0 and not s["timed_out"] for s in steps)
    assert json.loads((unpacked / "env.json").read_text())["cuda_available"] in (True, False)
    # The collected CUDA tests are named in the junit file even where they cannot run.
    assert "test_gpu_calibration" in (unpacked / "logs" / "tests.log").read_text()
    capture = unpacked / "capture-fp32" / "mlp-tiny"
    profile = json.loads((capture / "mlp-tiny-fp32-cpu.profile.json").read_text())
    assert profile["workload"]["name"] == "mlp-tiny"
    analysis = analyse_traces(load_traces([capture / "mlp-tiny-fp32-cpu.pt.trace.json.gz"]))
    assert len(analysis.ranks[0].steps) == 3
    memory = json.loads((capture / "mlp-tiny-fp32-cpu.memory.json").read_text())
    assert memory["profile_memory"]["peak_bytes"] > 0
    assert (unpacked / "cpu" / "mlp-tiny-fp32-cpu.profile.json").exists()
    # Each variant of the changed step is traced and timed.
    whatif = json.loads((unpacked / "whatif" / "whatif.json").read_text())
    (result,) = whatif["results"]
    assert set(result["median_s"]) == {"forloop", "foreach", "fused"}
    assert all(t > 0 for t in result["median_s"].values())
    fused = load_traces([unpacked / "whatif" / "mlp-tiny-fp32-fused.pt.trace.json.gz"])
    assert len(analyse_traces(fused).ranks[0].steps) == 3


def test_a_step_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    module = gpu_run()
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"  # noqa: E501
    step = module.Step("slow", [sys.executable, "-c", child], 1.0, "base")
    start = time.perf_counter()
    outcome = module.run_step(step, tmp_path, timeout_s=1.0)
    assert outcome.timed_out and outcome.returncode is None
    assert time.perf_counter() - start < 10
    module.pack(tmp_path, tmp_path, "base")
    with tarfile.open(tmp_path / "base.tar.gz") as tar:
        assert "logs/slow.log" in tar.getnames()
