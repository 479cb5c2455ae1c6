"""Every command follows the same conventions: -h and --help, --version, one-line usage
errors with a close match, and --json with a path or, bare, on stdout."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from factories import RunCli
from lightspeed.cli import app
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.link import LinkMeasurement

DATA = Path(__file__).parent / "data"
TRACE = DATA / "traces" / "hta-mi250-minitoy-train.json.gz"
BENCHES = (str(DATA / "bench" / "mlp-ncf-a.json"), str(DATA / "bench" / "mlp-ncf-b.json"))

# The least each command needs to run (quickly) and produce a result.
RUNS: dict[str, tuple[str, ...]] = {
    "hw list": (),
    "hw show": ("a100-80gb-sxm",),
    "hw calibrate": (),
    "hw link": ("--max-bytes", "1024"),
    "roofline": ("--flops", "1e9", "--bytes", "1e6", "--peak-flops", "1e12", "--bandwidth", "1e11"),
    "suite": (),
    "explain": ("MFU",),
    "time": ("mlp-tiny", "--hardware", "local", "--budget", "0.05", "--warmup", "1"),
    "serve-profile": (
        "mlp-tiny",
        "--hardware",
        "local",
        "--batch-sizes",
        "1,2",
        "--budget",
        "0.02",
    ),
    "serve-plan": (str(DATA / "serving" / "sessions.toml"), "--simulate", "2"),
    "loadgen": (
        "mlp-tiny",
        "--rate",
        "50",
        "--duration",
        "0.2",
        "--profile",
        str(DATA / "serving" / "mlp-tiny.json"),
    ),
    "profile": ("mlp-tiny", "--hardware", "local", "--budget", "0.05", "--steps", "1"),
    "trace": (str(TRACE),),
    "bench": ("mlp-tiny", "--hardware", "local", "--rounds", "1", "--budget", "0.02"),
    "history": (),
    "compare": BENCHES,
    "predict": (str(DATA / "profiles" / "mlp-tiny-schema1.json"), "--hardware", "h100-sxm"),
    "tune": ("mlp-tiny", "--only", "gist", "--hardware", "local", "--budget", "0.05"),
    "sweep": ("mlp-tiny", "--space", "lr=[0.001]", "--trials", "2", "--k", "2", "--steps", "1"),
    "report": (
        BENCHES[0],
        "--html",
        str(Path(tempfile.gettempdir()) / "lightspeed-conventions-report.html"),
    ),
}


def command_paths(group: object, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Every runnable command under `group`, as 'hw show'."""
    commands = getattr(group, "commands", None)
    if commands is None:
        yield " ".join(prefix)
        return
    for name, command in commands.items():
        yield from command_paths(command, (*prefix, name))


@pytest.fixture
def quick_calibration(monkeypatch: pytest.MonkeyPatch, calibrated_cpu: Hardware) -> Hardware:
    """`hw calibrate` answers with the fixture's calibration instead of measuring."""
    from lightspeed.hardware import resolve

    monkeypatch.setattr(resolve, "local_hardware", lambda *a, **k: calibrated_cpu)
    return calibrated_cpu


# A server runs until stopped, so it writes no result: what it did is on its /metrics
# (tests/serving/test_server.py runs it).
SERVERS = ("serve",)


def test_every_command_is_covered() -> None:
    assert set(command_paths(typer.main.get_command(app))) == {*RUNS, *SERVERS}


@pytest.mark.parametrize("command", sorted([*RUNS, *SERVERS]))
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(run_cli: RunCli, command: str, flag: str) -> None:
    code, out, err = run_cli(*command.split(), flag)
    assert (code, err) == (0, "")
    assert out.startswith(f"Usage: lightspeed {command} ")
    assert ("--json [PATH]" in out) is (command not in SERVERS)


@pytest.mark.parametrize("command", ["", *sorted([*RUNS, *SERVERS])])
def test_version(run_cli: RunCli, command: str) -> None:
    code, out, _ = run_cli(*command.split(), "--version")
    assert code == 0
    assert out.startswith("lightspeed ") and "torch " in out


@pytest.mark.parametrize("command", sorted(RUNS))
def test_a_bad_option_is_one_line_with_a_close_match(run_cli: RunCli, command: str) -> None:
    code, out, err = run_cli(*command.split(), "--jsno")
    assert (code, out) == (2, "")
    assert err == (
        "lightspeed: error: no such option --jsno; did you mean --json?"
        f" (see 'lightspeed {command} --help')\n"
    )


def test_an_unknown_command_is_one_line_with_a_close_match(run_cli: RunCli) -> None:
    code, _, err = run_cli("profle", "mlp-tiny")
    assert code == 2
    assert err == (
        "lightspeed: error: no such command 'profle'; did you mean 'profile'?"
        " (see 'lightspeed --help')\n"
    )


def test_bare_lightspeed_prints_help(run_cli: RunCli) -> None:
    code, out, _ = run_cli()
    assert code == 0
    assert out.startswith("Usage: lightspeed ") and "--debug" in out and "profile" in out


@pytest.fixture
def quick_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """`hw link` answers with a link fitted to made-up ping-pong times instead of starting
    two processes (tests/test_nproc.py measures a real one)."""
    from lightspeed.measure.distributed import link_bench

    def measure_link(nproc: int, *, sizes: list[int], **_: object) -> LinkMeasurement:
        times = {size: 20e-6 + size / 1e9 for size in sizes}
        return link_bench.fit_link(times, link_id="measured-gloo-loopback", backend="gloo")

    monkeypatch.setattr(link_bench, "measure_link", measure_link)


@pytest.mark.usefixtures("quick_calibration", "quick_link")
@pytest.mark.parametrize("command", sorted(RUNS))
def test_json_on_stdout_and_to_a_file(run_cli: RunCli, command: str, tmp_path: Path) -> None:
    code, out, _ = run_cli(*command.split(), *RUNS[command], "--json")
    assert code == 0
    on_stdout = json.loads(out)
    assert on_stdout["schema_version"] == 4

    path = tmp_path / "out.json"
    code, out, err = run_cli(*command.split(), "--json", str(path), *RUNS[command])
    assert code == 0 and f"wrote {path}" in err
    in_file = json.loads(path.read_text())
    assert in_file["document"] == on_stdout["document"]
    assert out.strip(), "with a path, the report is drawn in the terminal too"


def test_threads_sets_torchs_thread_count(
    run_cli: RunCli, calibrated_cpu: Hardware, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from lightspeed.cli import main
    from lightspeed.facts.device import Device
    from lightspeed.hardware.cache import save_calibration

    before = torch.get_num_threads()
    try:
        # The made-up CPU at one thread too, so the run measures no calibration.
        torch.set_num_threads(1)
        save_calibration(Device.CPU, calibrated_cpu)
        torch.set_num_threads(before)
        # in-process without run_cli, which puts torch's thread count back afterwards
        main(["time", *RUNS["time"][:3], "--threads", "1", "--json"])
        assert json.loads(capsys.readouterr().out)["timing"]["median_s"] > 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    code, _, err = run_cli("profile", "mlp-tiny", "--threads", "0")
    assert code == 2 and err == "lightspeed: error: --threads 0 must be at least 1.\n"


def test_wide_piped_output_keeps_each_row_on_one_line(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With stdout no terminal (here captured), `--wide` draws names whole on their row
    instead of folding them inside an 80-column cell: nothing wraps the lines but the
    reader."""
    import gzip

    trace = Path(__file__).parent / "data" / "traces" / "hta-a100-alexnet-benchmark.json.gz"
    kernels = {e["name"] for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]}
    (name,) = [k for k in kernels if "max_pool_forward_nchw" in k]
    assert len(name) > 80  # longer than the width rich would fold it at
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli("trace", str(trace), "--wide")
    assert code == 0
    (row,) = [line for line in out.splitlines() if name in line]
    assert "computation" in row and "µs" in row  # the whole row, its figures beside it
