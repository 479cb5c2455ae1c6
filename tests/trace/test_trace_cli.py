"""`lightspeed trace` end to end: report, JSON keys, errors, and no torch on the way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trace_paths import trace

from factories import RunCli


def test_trace_report_and_json(run_cli: RunCli, tmp_path: Path) -> None:
    out_path = tmp_path / "t.json"
    code, out, err = run_cli(
        "trace", str(trace("hta-v100-ddp-cnn-train-rank0")), "--json", str(out_path)
    )
    assert code == 0, err
    assert "compute" in out and "Top kernels" in out and "Steps" in out
    doc = json.loads(out_path.read_text())
    assert (doc["schema_version"], doc["document"]) == (4, "trace-analysis")
    (rank,) = doc["ranks"]
    assert set(rank["temporal_breakdown"]) >= {
        "compute_s",
        "communication_s",
        "memory_s",
        "idle_s",
        "total_s",
    }
    assert set(rank["idle_breakdown"]) == {"host_wait_s", "kernel_wait_s", "other_s"}
    assert rank["bound"] == "compute"
    assert all(set(f) == {"kind", "message", "evidence"} for f in rank["findings"])
    assert [s["step"] for s in rank["steps"]] == [101, 102, 103, 104, 105]
    t = rank["temporal_breakdown"]
    parts = t["compute_s"] + t["communication_s"] + t["memory_s"] + t["other_s"] + t["idle_s"]
    assert abs(parts - t["total_s"]) < 1e-9


def test_the_last_step_is_left_out_of_whole_trace_figures_unless_asked(
    run_cli: RunCli, tmp_path: Path
) -> None:
    path = str(trace("hta-v100-ddp-cnn-train-rank0"))
    code, out, _ = run_cli("trace", path, "--json", str(tmp_path / "a.json"))
    assert code == 0 and "last step left out, as HTA does" in out
    code, out, _ = run_cli("trace", path, "--include-last-step", "--json", str(tmp_path / "b.json"))
    assert code == 0 and "last step left out" not in out
    (left_out,) = json.loads((tmp_path / "a.json").read_text())["ranks"]
    (counted,) = json.loads((tmp_path / "b.json").read_text())["ranks"]
    assert (left_out["last_step_left_out"], counted["last_step_left_out"]) == (True, False)
    # Steps 101–105: the device time of the whole trace loses step 105's.
    assert left_out["temporal_breakdown"]["total_s"] < counted["temporal_breakdown"]["total_s"]
    assert left_out["steps"] == counted["steps"]


def test_one_step_in_detail_and_an_unknown_step(run_cli: RunCli, tmp_path: Path) -> None:
    path = str(trace("hta-v100-ddp-cnn-train-rank0"))
    code, out, _ = run_cli("trace", path, "--step", "103")
    assert code == 0 and "step 103" in out
    code, out, err = run_cli("trace", path, "--step", "7")
    assert code == 2 and out == ""
    assert err.strip() == (
        "lightspeed: error: --step 7: no ProfilerStep#7 in the trace; its steps:"
        " 101, 102, 103, 104, 105."
    )
    # What was analysed before the error is still written.
    code, _, _ = run_cli("trace", path, "--step", "7", "--json", str(tmp_path / "t.json"))
    assert code == 2
    assert [
        s["step"] for s in json.loads((tmp_path / "t.json").read_text())["ranks"][0]["steps"]
    ] == [
        101,
        102,
        103,
        104,
        105,
    ]


def test_two_ranks_and_a_bert_trace_in_the_report(run_cli: RunCli, tmp_path: Path) -> None:
    for rank in (0, 1):
        name = f"hta-recsys-128ranks-sampled-rank{rank}.json.gz"
        (tmp_path / name).write_bytes(trace(name.removesuffix(".json.gz")).read_bytes())
    code, out, err = run_cli("trace", str(tmp_path))
    assert code == 0, err
    assert "Across ranks" in out and "Collectives matched across ranks" in out
    assert "2 of 128 ranks given" in out
    code, out, err = run_cli("trace", str(trace("tracelens-h100-bert-small-inference")))
    assert code == 0, err
    assert "26 products" in out and "of their speed of light on h100-sxm" in out


def test_a_corrupt_trace_is_one_line_and_exit_2(run_cli: RunCli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "k"')
    code, _, err = run_cli("trace", str(bad))
    assert code == 2
    assert err.startswith("lightspeed: error: ") and str(bad) in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_reading_traces_never_imports_torch() -> None:
    # main() ends with typer's SystemExit, so the check runs at interpreter exit.
    program = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules))\n"
        "from lightspeed.cli import main\n"
        f"main(['trace', {str(trace('hta-a100-cuda-event-sync'))!r}, '--json', '-'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("torch imported: False")


def test_a_trace_with_no_device_shows_the_hosts_busy_and_comm(run_cli: RunCli) -> None:
    code, out, _ = run_cli("trace", str(trace("hta-cpu-only-rank34")))
    assert code == 0
    assert "the host's time; the trace has no device" in out
    (row,) = [line for line in out.splitlines() if " 551 " in line]
    # Step 551: 210 ms, 179 ms of it in host collectives (a device column would read 0).
    assert "210 ms" in row and row.count("179 ms") == 2
