"""Shared fixtures: a private cache directory, and a calibrated CPU that needs no measuring."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Calibration, DeviceKind, Hardware
from lightspeed.hardware.cache import save_calibration

# Ceilings of a made-up CPU: round numbers so tests can check arithmetic on them.
FAKE_CPU = Hardware(
    id="local",
    name="test CPU",
    kind=DeviceKind.CPU,
    peak_flops_per_s={Precision.FP32: 100e9, Precision.FP64: 50e9, Precision.BF16: 200e9},
    memory_bandwidth_bytes_per_s=20e9,
    memory_bytes=8 * 2**30,
    sources={"*": "test fixture"},
    calibration=Calibration(
        method="fixture",
        library="none",
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        measured_at="2026-01-01T00:00:00+00:00",
        best_matmul_size={Precision.FP32: 1024},
    ),
)


@pytest.fixture(autouse=True)
def private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own cache and data directories, never the user's."""
    path = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(path))
    monkeypatch.setenv("LIGHTSPEED_DATA_DIR", str(tmp_path_factory.mktemp("data")))
    return path


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calibrations in tests do not wait for the machine to be quiet (the suite keeps it
    busy); tests of that wait give their own checks."""
    from lightspeed.facts.timing import NoiseCheck
    from lightspeed.hardware import resolve

    monkeypatch.setattr(resolve, "quiet_check", lambda device, window_s=1.0: NoiseCheck())


@pytest.fixture
def calibrated_cpu(private_cache: Path) -> Iterator[Hardware]:
    """A cached calibration of the local CPU, so `--hardware local` measures nothing."""
    save_calibration(Device.CPU, FAKE_CPU)
    yield FAKE_CPU


RunCli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """Run `lightspeed ARGS…` in-process; returns (exit status, stdout, stderr)."""
    from lightspeed.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run
