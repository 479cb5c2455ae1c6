"""Every warning a result carries reaches both the terminal and the JSON, from the one
place every renderer reads (`Document.warnings`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from factories import RunCli
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.timing import Measurement, NoiseCheck
from lightspeed.hardware.cache import save_calibration
from lightspeed.measure import workload_timing
from lightspeed.measure.noise import canary_kernel

# A measurement with every timing warning: few and noisy replicates, still drifting,
# faulting its memory in every step, on a machine whose speed changed, with neighbours
# stealing time and a high load.
NOISY = Measurement(
    times_s=(0.10, 0.13, 0.10),
    steps_per_replicate=1,
    warmup_steps=40,
    warmup_s=15.2,
    settled=False,
    page_faults_per_call=120_000,
    kernel_cpu_share=0.3,
    freed_memory_kept=False,
)
BUSY = NoiseCheck(
    canary_before_per_s=100e9,
    canary_after_per_s=50e9,
    steal_share=0.2,
    load_average=9.0,
    cpu_count=2,
)


class BusyProbe:
    @classmethod
    def start(cls, device: Device) -> BusyProbe:
        return cls()

    def finish(self) -> NoiseCheck:
        return BUSY


@pytest.fixture
def noisy_timing(monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    """The step timer measures NOISY on a BUSY machine; its expected warnings."""
    monkeypatch.setattr(workload_timing, "measure", lambda *a, **k: NOISY)
    monkeypatch.setattr(workload_timing, "NoiseProbe", BusyProbe)
    monkeypatch.setattr(workload_timing, "keep_freed_memory", lambda: False)
    expected = dataclasses.replace(NOISY, noise=BUSY).warnings
    assert len(expected) == 7  # one of each kind
    return expected


def flat(text: str) -> str:
    """`text` without whitespace: the terminal wraps long lines, and folds long words."""
    return "".join(text.split())


def check_shown(out: str, doc: dict[str, Any], warnings: tuple[str, ...]) -> None:
    assert "Warnings" in out
    for w in warnings:
        assert flat(f"warning: {w}") in flat(out)
        assert w in doc["warnings"]


@pytest.mark.usefixtures("calibrated_cpu")
@pytest.mark.parametrize("command", ["time", "profile"])
def test_timing_warnings_in_terminal_and_json(
    run_cli: RunCli, noisy_timing: tuple[str, ...], command: str, tmp_path: Path
) -> None:
    path = tmp_path / "out.json"
    code, out, _ = run_cli(command, "mlp-tiny", "--hardware", "local", "--json", str(path))
    assert code == 0
    check_shown(out, json.loads(path.read_text()), noisy_timing)


def test_a_warning_logged_while_running_is_in_the_report(
    run_cli: RunCli, calibrated_cpu: Hardware, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from lightspeed.hardware import resolve

    assert calibrated_cpu.calibration is not None
    calibration = dataclasses.replace(
        calibrated_cpu.calibration,
        canary_kernel=canary_kernel(Device.CPU),
        canary_flops_per_s=100e9,
    )
    save_calibration(Device.CPU, dataclasses.replace(calibrated_cpu, calibration=calibration))
    monkeypatch.setattr(resolve, "canary_rate", lambda device: 40e9)
    path = tmp_path / "hw.json"
    code, out, _ = run_cli("hw", "show", "local", "--json", str(path))
    assert code == 0
    busy = (
        "this machine is busy: a canary kernel runs at 40% of its rate when cpu was"
        " calibrated; timings will be slower than the machine can run"
    )
    check_shown(out, json.loads(path.read_text()), (busy,))


def test_a_report_without_warnings_says_nothing(run_cli: RunCli) -> None:
    code, out, _ = run_cli("hw", "show", "h100-sxm", "--json")
    assert code == 0 and json.loads(out)["warnings"] == []
    code, out, _ = run_cli("hw", "show", "h100-sxm")
    assert code == 0 and "Warnings" not in out
