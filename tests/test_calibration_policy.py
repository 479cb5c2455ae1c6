"""The calibration cache policy: implausible calibrations rejected, cached ones
re-validated by their canary, and the noise check around every measurement."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

import lightspeed.hardware.cache as cache_module
import lightspeed.hardware.resolve as resolve_module
import lightspeed.measure.noise as noise_module
from factories import FAKE_CPU, RunCli
from lightspeed.dtypes import Precision
from lightspeed.errors import CalibrationError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Calibration, Hardware
from lightspeed.facts.timing import NoiseCheck
from lightspeed.hardware.cache import calibration_path, load_calibration, machine_key
from lightspeed.hardware.plausibility import problems
from lightspeed.hardware.resolve import local_hardware
from lightspeed.measure.noise import NoiseProbe, canary_kernel, cpu_ticks

CANARY = 100e9


def calibrated(
    *, fp32: float = 100e9, memory: float = 20e9, cache: float | None = 80e9, canary: float = CANARY
) -> Hardware:
    """The fixture CPU with these ceilings and a canary measured at `canary` FLOP/s."""
    assert FAKE_CPU.calibration is not None
    return dataclasses.replace(
        FAKE_CPU,
        peak_flops_per_s={Precision.FP32: fp32},
        memory_bandwidth_bytes_per_s=memory,
        cache_bytes=None if cache is None else 32 * 2**20,
        cache_bandwidth_bytes_per_s=cache,
        calibration=dataclasses.replace(
            FAKE_CPU.calibration,
            canary_kernel=canary_kernel(Device.CPU),
            canary_flops_per_s=canary,
        ),
    )


class Machine:
    """Stands in for the measurements: what `calibrate` returns, call after call, and
    the canary's rate now."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *results: Hardware, canary: float = CANARY):
        self.results = list(results)
        self.calibrations = 0
        self.canary = canary
        monkeypatch.setattr(resolve_module, "calibrate", self.calibrate)
        monkeypatch.setattr(resolve_module, "canary_rate", lambda device: self.canary)

    def calibrate(self, device: Device) -> Hardware:
        self.calibrations += 1
        return self.results.pop(0)


def cache(hw: Hardware) -> None:
    cache_module.save_calibration(Device.CPU, hw)


# -- plausibility -----------------------------------------------------------------------


def test_a_plausible_calibration_has_no_problems() -> None:
    assert problems(calibrated()) == []
    assert problems(calibrated(fp32=60e9), previous=calibrated()) == []


def test_a_cache_slower_than_memory_is_implausible() -> None:
    (found,) = problems(calibrated(memory=20e9, cache=1.76e9))
    assert "cache bandwidth (1.76 GB/s) is below its memory bandwidth (20 GB/s)" in found


def test_a_peak_far_below_the_previous_one_is_implausible() -> None:
    found = problems(calibrated(fp32=40e9, memory=5e9), previous=calibrated())
    assert found == [
        "its fp32 peak (40 GFLOP/s) is below half the 100 GFLOP/s measured before",
        "its memory bandwidth (5 GB/s) is below half the 20 GB/s measured before",
    ]


# -- the policy: reject, retry, keep the previous ------------------------------------------


def test_a_plausible_calibration_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = Machine(monkeypatch, calibrated())
    assert local_hardware(Device.CPU) == calibrated()
    assert load_calibration(Device.CPU) == calibrated()
    assert machine.calibrations == 1


def test_an_implausible_calibration_is_measured_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    machine = Machine(monkeypatch, calibrated(cache=1e9), calibrated())
    with caplog.at_level(logging.WARNING):
        assert local_hardware(Device.CPU) == calibrated()
    assert machine.calibrations == 2
    assert "implausible" in caplog.text and "measuring once more" in caplog.text
    assert load_calibration(Device.CPU) == calibrated()


def test_twice_implausible_with_nothing_cached_is_an_error_and_caches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Machine(monkeypatch, calibrated(cache=1e9), calibrated(cache=1e9))
    with pytest.raises(CalibrationError, match="rejected, not cached: its cache bandwidth"):
        local_hardware(Device.CPU)
    assert not calibration_path(Device.CPU).exists()


def test_twice_implausible_keeps_the_previous_calibration(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache(calibrated())
    before = calibration_path(Device.CPU).read_text()
    Machine(monkeypatch, calibrated(fp32=30e9), calibrated(fp32=30e9))
    with caplog.at_level(logging.WARNING):
        assert local_hardware(Device.CPU, recalibrate=True) == calibrated()
    assert "calibration rejected, not cached: its fp32 peak" in caplog.text
    assert calibration_path(Device.CPU).read_text() == before


def test_force_caches_an_implausible_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    cache(calibrated())
    Machine(monkeypatch, calibrated(fp32=30e9))
    assert local_hardware(Device.CPU, recalibrate=True, force=True) == calibrated(fp32=30e9)
    assert load_calibration(Device.CPU) == calibrated(fp32=30e9)


def test_hw_calibrate_rejected_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    Machine(monkeypatch, calibrated(cache=1e9), calibrated(cache=1e9))
    code, _out, err = run_cli("hw", "calibrate")
    assert code == 2
    (message,) = [line for line in err.splitlines() if line.startswith("lightspeed: error: ")]
    assert "Traceback" not in err
    assert "calibration rejected, not cached" in message and "--force" in message


# -- the canary ---------------------------------------------------------------------------


def test_a_cached_calibration_whose_canary_agrees_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    cache(calibrated())
    machine = Machine(monkeypatch, canary=1.1 * CANARY)
    assert local_hardware(Device.CPU) == calibrated()
    assert machine.calibrations == 0


def test_a_canary_faster_than_at_calibration_recalibrates(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache(calibrated())
    faster = calibrated(fp32=180e9, canary=1.6 * CANARY)
    machine = Machine(monkeypatch, faster, canary=1.6 * CANARY)
    with caplog.at_level(logging.WARNING):
        assert local_hardware(Device.CPU) == faster
    assert machine.calibrations == 1
    assert "slower than this machine is now" in caplog.text
    assert load_calibration(Device.CPU) == faster


def test_a_canary_slower_than_at_calibration_keeps_it_and_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache(calibrated())
    machine = Machine(monkeypatch, canary=0.5 * CANARY)
    with caplog.at_level(logging.WARNING):
        assert local_hardware(Device.CPU) == calibrated()
    assert machine.calibrations == 0
    assert "this machine is busy: a canary kernel runs at 50%" in caplog.text


def test_a_calibration_with_no_canary_is_kept_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    cache(FAKE_CPU)  # made by hand: nothing to compare a canary with
    machine = Machine(monkeypatch, canary=10 * CANARY)
    assert local_hardware(Device.CPU) == FAKE_CPU
    assert machine.calibrations == 0


def test_the_cache_is_keyed_by_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    before = machine_key(Device.CPU)
    monkeypatch.setattr(cache_module, "cpu_flags", lambda: "sse2 avx2")
    with_avx2 = machine_key(Device.CPU)
    monkeypatch.setattr(cache_module, "cpu_flags", lambda: "sse2 avx2 avx512f")
    assert len({before, with_avx2, machine_key(Device.CPU)}) == 3


def test_the_calibration_file_keeps_every_kernel_figure(private_cache: Path) -> None:
    assert FAKE_CPU.calibration is not None
    cal: Calibration = dataclasses.replace(
        FAKE_CPU.calibration,
        best_compute_kernel={Precision.FP32: "mm-nt"},
        compute_kernel_flops_per_s={Precision.FP32: {"mm-nn": 90e9, "mm-nt": 100e9}},
        memory_kernel_bytes_per_s={"copy": 15e9, "addcdiv": 20e9},
    )
    cache(dataclasses.replace(FAKE_CPU, calibration=cal))
    data = json.loads(calibration_path(Device.CPU).read_text())["hardware"]["calibration"]
    assert data["compute_kernel_flops_per_s"] == {"fp32": {"mm-nn": 90e9, "mm-nt": 100e9}}
    assert data["best_compute_kernel"] == {"fp32": "mm-nt"}
    loaded = load_calibration(Device.CPU)
    assert loaded is not None and loaded.calibration == cal


# -- the noise check ----------------------------------------------------------------------


def test_a_quiet_machine_gives_no_warning() -> None:
    quiet = NoiseCheck(
        canary_before_per_s=100e9,
        canary_after_per_s=110e9,
        steal_share=0.01,
        load_average=1.0,
        cpu_count=2,
    )
    assert quiet.warnings == ()


def test_noise_warnings_name_what_was_seen() -> None:
    noisy = NoiseCheck(
        canary_before_per_s=100e9,
        canary_after_per_s=50e9,
        steal_share=0.2,
        load_average=6.0,
        cpu_count=2,
    )
    canary, steal, load = noisy.warnings
    assert "canary kernel ran 50% slower after than before" in canary
    assert "20% of this machine's CPU time to other guests" in steal
    assert "load average 6.0 on 2 CPUs" in load


def test_a_canary_many_times_faster_says_how_many_times() -> None:
    # 210 / 10 = 21 times the rate: "2000% faster" reads badly
    moved = NoiseCheck(canary_before_per_s=10e9, canary_after_per_s=210e9)
    (warning,) = moved.warnings
    assert "a canary kernel ran 21× faster after than before" in warning
    assert "the timings may be off by as much" in warning and "%" not in warning
    # 250 / 100 = 2.5; under twice the rate, a percentage: 130 / 100 = 30% faster
    assert (
        "ran 2.5× faster"
        in NoiseCheck(canary_before_per_s=100e9, canary_after_per_s=250e9).warnings[0]
    )
    assert (
        "ran 30% faster"
        in NoiseCheck(canary_before_per_s=100e9, canary_after_per_s=130e9).warnings[0]
    )


def test_steal_time_is_read_from_proc_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    monkeypatch.setattr(noise_module, "_PROC_STAT", stat)
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 1 2 3\n")
    assert cpu_ticks() == (40, 1000)
    monkeypatch.setattr(noise_module, "canary_rate", lambda device: 1e9)
    probe = NoiseProbe.start(Device.CPU)
    stat.write_text("cpu  180 0 50 800 10 0 0 60 0 0\n")
    check = probe.finish()
    assert check.steal_share == pytest.approx(20 / 100)
    stat.write_text("garbage")
    assert cpu_ticks() is None


def test_a_timed_step_carries_its_noise_check_into_json(calibrated_cpu: Hardware) -> None:
    import lightspeed
    from lightspeed.report.timing_report import measurement_data

    timing = lightspeed.time_workload(
        lightspeed.load_target("mlp-tiny"), config=lightspeed.TimerConfig(budget_s=0.05)
    )
    noise = timing.measurement.noise
    assert noise is not None and noise.canary_before_per_s and noise.canary_after_per_s
    assert measurement_data(timing.measurement)["noise"]["canary_after_per_s"] > 0


def test_noise_warnings_reach_the_profile_report() -> None:
    import lightspeed
    from lightspeed.report.profile_report import profile_document
    from lightspeed.report.render_terminal import render_text

    path = Path(__file__).parent / "data" / "profiles" / "mlp-tiny-schema1.json"
    profile = lightspeed.load_profile(path)
    assert profile.timing is not None
    noisy = NoiseCheck(canary_before_per_s=100e9, canary_after_per_s=40e9)
    profile = dataclasses.replace(profile, timing=dataclasses.replace(profile.timing, noise=noisy))
    text = render_text(profile_document(lightspeed.analyse(profile)), width=100)
    assert "warning: the machine's speed changed while measuring" in " ".join(text.split())


def test_a_machine_whose_speed_changed_while_calibrating_is_implausible() -> None:
    hw = calibrated()
    assert hw.calibration is not None
    moved = dataclasses.replace(
        hw,
        calibration=dataclasses.replace(hw.calibration, canary_before_flops_per_s=2.5 * CANARY),
    )
    (found,) = problems(moved)
    assert "a canary kernel ran 60% slower after than before" in found
    faster = dataclasses.replace(
        hw,
        calibration=dataclasses.replace(hw.calibration, canary_before_flops_per_s=CANARY / 4),
    )
    (found,) = problems(faster)
    assert "a canary kernel ran 4× faster after than before" in found
    steady = dataclasses.replace(
        hw,
        calibration=dataclasses.replace(hw.calibration, canary_before_flops_per_s=1.2 * CANARY),
    )
    assert problems(steady) == []


# -- waiting for a quiet machine before calibrating ------------------------------------

BUSY = NoiseCheck(canary_before_per_s=100e9, canary_after_per_s=50e9, steal_share=0.2)
QUIET = NoiseCheck(canary_before_per_s=100e9, canary_after_per_s=99e9, steal_share=0.0)


class Checks:
    """Noise checks that find the machine busy `busy` times, then quiet; each takes one
    second of a fake clock."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.calls = 0
        self.now = 0.0

    def __call__(self, device: Device) -> NoiseCheck:
        self.calls += 1
        self.now += 1.0
        return BUSY if self.calls <= self.busy else QUIET

    def clock(self) -> float:
        return self.now


def test_a_quiet_machine_is_calibrated_at_once() -> None:
    checks = Checks(busy=0)
    noise = resolve_module.wait_until_quiet(Device.CPU, 30, check=checks, clock=checks.clock)
    assert (noise, checks.calls) == (QUIET, 1)


def test_a_busy_machine_is_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    checks = Checks(busy=5)
    with caplog.at_level(logging.WARNING):
        noise = resolve_module.wait_until_quiet(Device.CPU, 30, check=checks, clock=checks.clock)
    assert (noise, checks.calls) == (QUIET, 6)
    (waiting,) = caplog.records
    assert waiting.name == "lightspeed.progress" and "waiting up to 30 s" in waiting.getMessage()


def test_a_machine_busy_throughout_is_calibrated_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checks = Checks(busy=1000)
    with caplog.at_level(logging.WARNING):
        noise = resolve_module.wait_until_quiet(Device.CPU, 30, check=checks, clock=checks.clock)
    assert noise == BUSY and checks.calls == 30
    warning = caplog.records[-1]
    assert warning.name == "lightspeed.hardware.resolve"
    assert "calibrating although the machine is still busy after 30 s" in warning.getMessage()


def test_calibration_waits_for_quiet_first(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    checks = Checks(busy=2)

    def check(device: Device, window_s: float = 1.0) -> NoiseCheck:
        order.append("check")
        return checks(device)

    def measure(device: Device) -> Hardware:
        order.append("calibrate")
        return calibrated()

    monkeypatch.setattr(resolve_module, "quiet_check", check)
    monkeypatch.setattr(resolve_module, "calibrate", measure)
    local_hardware(Device.CPU)
    assert order == ["check", "check", "check", "calibrate"]


def test_a_report_keeps_the_busy_warning_but_not_the_wait(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    Machine(monkeypatch, calibrated())
    monkeypatch.setattr(resolve_module, "QUIET_WAIT_S", 0.0)
    monkeypatch.setattr(resolve_module, "quiet_check", lambda device, window_s=1.0: BUSY)
    code, out, _ = run_cli("hw", "calibrate", "--json")
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert any("calibrating although the machine is still busy" in w for w in warnings)
    assert not any("waiting up to" in w or "ceilings once" in w for w in warnings)


def test_a_busy_warning_is_printed_once(run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal report, a warning logged while the command ran is its report's to
    show, not stderr's as well; the live note about the wait does not repeat it."""
    Machine(monkeypatch, calibrated())
    monkeypatch.setattr(resolve_module, "QUIET_WAIT_S", 0.0)
    monkeypatch.setattr(resolve_module, "quiet_check", lambda device, window_s=1.0: BUSY)
    # The CLI logs on stderr through the root logger, as it does outside pytest (whose
    # own handlers there would keep `logging.basicConfig` from adding it).
    monkeypatch.setattr(logging.root, "handlers", [])
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    code, out, err = run_cli("hw", "calibrate")
    both = " ".join((out + err).split())
    assert code == 0
    assert both.count("calibrating although the machine is still busy") == 1
    assert both.count("canary kernel ran 50% slower") == 1
    assert "waiting up to 0 s" in err  # the live note stays


def test_a_warning_no_report_shows_is_printed_on_stderr(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that fails before its report still says what it warned about."""
    monkeypatch.setattr(resolve_module, "QUIET_WAIT_S", 0.0)
    monkeypatch.setattr(resolve_module, "quiet_check", lambda device, window_s=1.0: BUSY)

    def fails(device: Device) -> Hardware:
        raise CalibrationError("no matmul ran")

    monkeypatch.setattr(resolve_module, "calibrate", fails)
    monkeypatch.setattr(logging.root, "handlers", [])
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    code, out, err = run_cli("hw", "calibrate")
    assert code == 2 and out == ""
    warned = err.index("lightspeed: calibrating although the machine is still busy")
    assert warned < err.index("lightspeed: error: no matmul ran")


# -- the demo after a calibration ---------------------------------------------------------


def _demo_against(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, measured: Hardware, machine: Hardware
) -> tuple[list[str], dict[str, object], str]:
    """`lightspeed profile` of the demo's workload (at its tiny size), calibrating first:
    the noise check finds the machine busy twice, then quiet, and the calibration
    returns `measured`. The step is stubbed: each op takes between 1 and 1.5 times its
    speed-of-light time on `machine`, the ceilings the machine really has."""
    import lightspeed.workflows.profile as api_module
    from lightspeed.analysis.step_roofline import analyse_op

    order: list[str] = []
    checks = Checks(busy=2)

    def check(device: Device, window_s: float = 1.0) -> NoiseCheck:
        order.append("check")
        return checks(device)

    def calibrate(device: Device) -> Hardware:
        order.append("calibrate")
        return measured

    real = api_module.profile_workload

    def stubbed_step(*args: object, **kwargs: object) -> object:
        profile = real(*args, **kwargs)  # type: ignore[arg-type]
        ops = tuple(
            dataclasses.replace(op, time_s=analyse_op(op, machine).sol_time_s * (1 + (k % 6) / 10))
            for k, op in enumerate(profile.ops)
        )
        return dataclasses.replace(profile, ops=ops)

    monkeypatch.setattr(resolve_module, "quiet_check", check)
    monkeypatch.setattr(resolve_module, "calibrate", calibrate)
    monkeypatch.setattr(resolve_module, "canary_rate", lambda device: CANARY)
    monkeypatch.setattr(api_module, "profile_workload", stubbed_step)
    # --quick: what is under test is which ceilings the step is judged against, not how
    # long it is timed (its op times are stubbed).
    code, out, _ = run_cli("profile", "mlp-tiny", "--quick", "--json=-")
    assert code == 0
    document = json.loads(out)
    first = list(order)
    _, terminal, _ = run_cli("profile", "mlp-tiny", "--quick")
    assert order == first  # the second run took the cached calibration
    return first, document, terminal


def _phase_fractions(document: dict[str, object]) -> dict[str, float]:
    phases = document["phases"]
    assert isinstance(phases, dict) and phases
    return {name: p["sol_time_s"] / p["time_s"] for name, p in phases.items()}


def test_the_demo_after_a_quiet_calibration_shows_no_phase_above_its_speed_of_light(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet = calibrated(fp32=200e9, memory=30e9, cache=120e9)
    order, document, terminal = _demo_against(run_cli, monkeypatch, quiet, quiet)
    assert order == ["check", "check", "check", "calibrate"]  # only once it was quiet
    fractions = _phase_fractions(document)
    assert all(0.6 < f <= 1.0 for f in fractions.values()), fractions
    findings = document["findings"]
    assert isinstance(findings, list)
    assert "above-speed-of-light" not in {f["kind"] for f in findings}
    assert "faster than the speed of light" not in " ".join(terminal.split())


def test_a_calibration_on_a_busy_machine_would_read_above_the_speed_of_light(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: ceilings measured at half speed put the same step above 100 %."""
    quiet = calibrated(fp32=200e9, memory=30e9, cache=120e9)
    busy = calibrated(fp32=100e9, memory=15e9, cache=60e9)
    _, document, terminal = _demo_against(run_cli, monkeypatch, busy, quiet)
    assert all(f > 1.0 for f in _phase_fractions(document).values())
    assert "faster than the speed of light" in " ".join(terminal.split())
    findings = document["findings"]
    assert isinstance(findings, list)
    assert "above-speed-of-light" in {f["kind"] for f in findings}
