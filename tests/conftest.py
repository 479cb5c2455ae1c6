"""Shared fixtures: a private cache directory, a calibrated CPU that needs no measuring,
timings that settle quickly, and the Hypothesis profiles (a few examples locally, the
full count in CI). The one test that calibrates this machine for real is
test_sol_bound.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from factories import CI_EXAMPLES, DEV_EXAMPLES, FAKE_CPU, RunCli
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.hardware.cache import save_calibration

# "ci": each property test's full count of examples (`factories.examples`); "dev": a
# few, for a quick local run. CI sets CI=true; HYPOTHESIS_PROFILE chooses either.
settings.register_profile("ci", max_examples=CI_EXAMPLES)
settings.register_profile("dev", max_examples=DEV_EXAMPLES)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
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
def short_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real timings in tests stop waiting for the warm-up to settle after 0.5 s (a busy
    2-core machine may never settle, and the default waits 15 s); the timer's own tests
    check settling on a fake clock with the default. Subprocesses inherit it."""
    from lightspeed.measure.timer import MAX_SETTLE_ENV

    monkeypatch.setenv(MAX_SETTLE_ENV, "0.5")


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


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """Run `lightspeed ARGS…` in-process; returns (exit status, stdout, stderr)."""
    from lightspeed.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        import torch

        # `--threads` (loadgen's default: 1) sets the process's torch threads, as it
        # should for a command that ends with its process; this one goes on to later tests.
        threads = torch.get_num_threads()
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        finally:
            torch.set_num_threads(threads)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap() -> None:
    """Each test module starts by collecting what the earlier ones left, then freezes
    what survives (torch, the test modules, the session's fixtures): `measure_memory`
    collects garbage before each step it measures, and a full collection would scan
    those millions of objects each time (0.3 s a step measured: 87 s of a 380 s run),
    though none of them is the measured step's. A collection skips frozen objects, so
    this one scans only what the last module made; one of them that turns into garbage
    later is never freed (the session's fixtures live to its end anyway)."""
    import gc

    gc.collect()
    gc.freeze()
