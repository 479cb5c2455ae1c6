"""`lightspeed bench`: names by size, interleaved rounds, failures kept apart, and a
JSON whose results carry a profile's objects."""

from __future__ import annotations

import dataclasses
import itertools
import json
import statistics
from pathlib import Path

import pytest
import torch

from factories import FAKE_CPU, RunCli
from lightspeed import progress, suite
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError, UnknownNameError
from lightspeed.facts.bench import BenchResult, BenchRun
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.timing import Measurement, NoiseCheck, WorkloadInfo
from lightspeed.measure.timer import TimerConfig
from lightspeed.report.bench_report import bench_document
from lightspeed.report.profile_json import load_profile
from lightspeed.workflows.bench import bench, bench_names, families, retry_noisy_rounds, variants
from lightspeed.workload import Workload
from lightspeed.workload.targets import load_target

DATA = Path(__file__).parent / "data" / "workloads.py"
INFO = WorkloadInfo(
    name="w",
    batch_size=4,
    device=Device.CPU,
    precision=Precision.FP32,
    parameter_count=10,
    tokens_per_sample=None,
)


def _measured(*times_s: float) -> Measurement:
    return Measurement(times_s=times_s, steps_per_replicate=1, warmup_steps=3)


def test_every_workload_of_the_suite_is_a_size_of_one_family() -> None:
    sized = variants()
    assert sized["gpt2"] == ("gpt2-small", "gpt2-tiny")
    assert sized["mlp"] == ("mlp", "mlp-tiny")
    assert sorted(n for pair in sized.values() for n in pair) == suite.names()
    assert bench_names([], "tiny", every=True) == [sized[f][1] for f in families()]
    assert bench_names([], "full", every=True) == [sized[f][0] for f in families()]


def test_names_are_taken_at_the_size_asked() -> None:
    assert bench_names(["mlp", "gpt2-small"], "tiny", every=False) == ["mlp-tiny", "gpt2-tiny"]
    assert bench_names(["mlp-tiny", "gpt2"], "full", every=False) == ["mlp", "gpt2-small"]
    assert bench_names(["gpt2", "gpt2-tiny"], "tiny", every=False) == ["gpt2-tiny"]


@pytest.mark.parametrize(
    ("names", "size", "every", "error", "message"),
    [
        (["mpl"], "tiny", False, UnknownNameError, "Did you mean 'mlp"),
        (["mlp"], "huge", False, ConfigError, "--size 'huge': choose tiny or full"),
        (["mlp"], "tiny", True, ConfigError, "not both"),
        ([], "tiny", False, ConfigError, "or pass --all"),
    ],
)
def test_bad_names_say_what_to_do(
    names: list[str], size: str, every: bool, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        bench_names(names, size, every)


def test_the_step_is_the_median_of_the_rounds_and_their_spread_is_kept() -> None:
    result = BenchResult(
        workload=INFO,
        profile=None,
        rounds=(_measured(0.010, 0.011), _measured(0.013), _measured(0.012)),
    )
    assert result.round_medians_s == pytest.approx((0.0105, 0.013, 0.012))
    assert result.step_s == 0.012
    # (0.013 − 0.0105) / 0.012
    assert result.round_spread == pytest.approx(0.0025 / 0.012)
    assert BenchResult(workload=INFO, profile=None, rounds=(_measured(1.0),)).round_spread is None


def test_rounds_interleave_and_a_failing_workload_leaves_the_others_running() -> None:
    workloads = [
        load_target("mlp-tiny"),
        load_target(f"{DATA}:fails_on_fifth_step"),
        load_target("a3c-tiny").with_batch_size(2),
    ]
    stages: list[str] = []

    def listen(open_now: tuple[str, ...]) -> None:
        if open_now and (not stages or stages[-1] != open_now[0]):
            stages.append(open_now[0])

    with progress.listening(listen):
        run = bench(workloads, FAKE_CPU, rounds=3, budget_s=0.02)
    ok, failed, rl = run.results
    assert [r.workload.name for r in run.results] == ["mlp-tiny", "fails-later", "a3c-tiny"]
    assert stages == [
        "mlp-tiny, round 1 of 3",
        "fails-later, round 1 of 3",
        "a3c-tiny, round 1 of 3",
        "mlp-tiny, round 2 of 3",
        "a3c-tiny, round 2 of 3",
        "mlp-tiny, round 3 of 3",
        "a3c-tiny, round 3 of 3",
    ]
    assert len(ok.rounds) == len(rl.rounds) == 3 and ok.failure is None
    assert ok.profile is not None and ok.profile.timing is ok.rounds[0]
    assert ok.profile.memory is not None and ok.profile.ops
    assert failed.failure is not None and "fails under observation" in failed.failure
    # Its profile's timing finished before the capture failed: it is kept.
    assert len(failed.rounds) == 1
    assert (run.size, run.rounds, run.threads >= 1) == ("tiny", 3, True)
    doc = bench_document(run)
    assert any(
        "fails under observation" in line for s in doc.sections for line in getattr(s, "lines", ())
    )


def test_counting_tells_listeners_the_fraction_done() -> None:
    seen: list[tuple[int, int] | None] = []
    with (
        progress.listening(lambda _: seen.append(progress.counted())),
        progress.counting(2) as advance,
    ):
        advance()
        advance()
    assert seen == [(0, 2), (1, 2), (2, 2)]
    assert progress.counted() is None


def test_bench_json_results_carry_a_profiles_objects(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    path = tmp_path / "bench.json"
    code, _, err = run_cli(
        "bench",
        "mlp",
        "--rounds",
        "2",
        "--budget",
        "0.02",
        "--hardware",
        "local",
        "--json",
        str(path),
    )
    assert code == 0, err
    doc = json.loads(path.read_text())
    assert (doc["document"], doc["size"], doc["rounds"]) == ("bench", "tiny", 2)
    (result,) = doc["results"]
    code, out, _ = run_cli(
        "profile",
        "mlp-tiny",
        "--budget",
        "0.02",
        "--steps",
        "1",
        "--hardware",
        "local",
        "--json=-",
    )
    profile = json.loads(out)
    for key in ("workload", "timing", "totals", "memory"):
        assert set(result[key]) == set(profile[key]), key
    assert result["workload"] == profile["workload"]
    assert len(result["rounds"]) == 2 and result["failure"] is None
    assert result["step_s"] == statistics.median(result["round_medians_s"])


def test_the_whole_tiny_suite_benches_with_every_flop_known() -> None:
    """The smoke tier: every family at its tiny size profiles and times, with no op
    whose FLOPs are unknown (timed as briefly as the timer allows: what counts here is
    that each runs)."""
    from lightspeed.analysis.profile_analysis import analyse

    names = bench_names([], "tiny", every=True)
    assert len(names) >= 13
    brief = TimerConfig(warmup_steps=1, budget_s=0.02, min_replicates=2, max_settle_s=0)
    run = bench([load_target(n) for n in names], FAKE_CPU, rounds=1, timer=brief, profiled_steps=1)
    failed = {r.workload.name: r.failure for r in run.results if r.failure}
    assert failed == {}
    for result in run.results:
        assert result.profile is not None and result.step_s
        totals = analyse(result.profile).totals
        assert totals.unknown_flops_ops == (), result.workload.name
        assert result.profile.memory is not None and result.profile.memory.peak_bytes > 0


def test_fewer_than_three_rounds_are_warned_about() -> None:
    result = BenchResult(workload=INFO, profile=None, failure="out of memory")
    run = BenchRun(results=(result,), hardware=FAKE_CPU, size="tiny", rounds=1, threads=2)
    (warning,) = [w for w in bench_document(run).warnings if "round" in w]
    assert warning.startswith("1 round: fewer than 3 measure no reliable noise")


BUSY = NoiseCheck(load_average=9.0, cpu_count=2)  # a loaded 2-CPU machine
QUIET = NoiseCheck(load_average=0.5, cpu_count=2)


def _checked(time_s: float, noise: NoiseCheck) -> Measurement:
    return Measurement(times_s=(time_s,) * 5, steps_per_replicate=1, warmup_steps=3, noise=noise)


def test_a_result_keeps_what_its_rounds_noise_checks_said_in_its_json_and_warnings() -> None:
    profile = load_profile(Path(__file__).parent / "data" / "profiles" / "mlp-tiny-schema1.json")
    noisy = BenchResult(
        workload=INFO,
        profile=profile,
        rounds=(_checked(0.01, QUIET), _checked(0.02, BUSY), _checked(0.01, QUIET)),
    )
    quiet = dataclasses.replace(noisy, rounds=(_checked(0.01, QUIET),) * 3)
    assert noisy.noise_warnings == ("round 2: the machine is busy: load average 9.0 on 2 CPUs",)
    assert quiet.noise_warnings == ()
    run = BenchRun(results=(noisy,), hardware=FAKE_CPU, size="tiny", rounds=3, threads=2)
    doc = bench_document(run)
    (result,) = doc.data["results"]
    assert (result["noise_warnings"], result["retries"]) == (list(noisy.noise_warnings), 0)
    (said,) = [w for w in doc.warnings if "busy" in w]
    assert said.startswith("w: noise check failed (round 2: the machine is busy")


def test_retrying_times_only_the_noisy_rounds_again_and_keeps_the_quieter() -> None:
    rounds = (_checked(0.01, QUIET), _checked(0.03, BUSY), _checked(0.01, QUIET))
    noisy = BenchResult(workload=INFO, profile=None, rounds=rounds)
    quiet = BenchResult(
        workload=dataclasses.replace(INFO, name="q"), profile=None, rounds=rounds[:1]
    )
    again = iter([_checked(0.04, BUSY), _checked(0.011, QUIET)])
    asked: list[str] = []

    def retime(name: str) -> Measurement:
        asked.append(name)
        return next(again)

    done = retry_noisy_rounds((noisy, quiet), retime, times=3)
    assert asked == ["w", "w"]  # the quiet workload never; the noisy one until quiet
    assert done[1] is quiet
    assert done[0].rounds == (rounds[0], _checked(0.011, QUIET), rounds[2])
    assert (done[0].retries, done[0].noise_warnings) == (2, ())
    # Still noisy after its one try: the first timing was no louder, so it stays.
    again = iter([_checked(0.04, BUSY)])
    (kept,) = retry_noisy_rounds((noisy,), retime, times=1)
    assert kept.rounds == rounds and kept.retries == 1


def test_bench_retries_noisy_workloads_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightspeed.facts.timing import StepTiming
    from lightspeed.workflows import bench as bench_module

    # Round 2 is noisy, every retry quiet (round 1, profiled for real, may be noisy
    # too on a busy test machine: its retry is quiet as well).
    checks = itertools.chain([BUSY], itertools.repeat(QUIET))

    def time_step(prepared: object, timer: TimerConfig) -> StepTiming:
        return StepTiming(workload=INFO, measurement=_checked(0.01, next(checks)))

    monkeypatch.setattr(bench_module, "time_step", time_step)
    brief = TimerConfig(warmup_steps=1, budget_s=0.02, min_replicates=2, max_settle_s=0)
    workload = Workload(
        name="linear",
        model=lambda: torch.nn.Linear(4, 4),
        batch=lambda n: torch.ones(n, 4),
        loss=lambda model, batch: model(batch).square().mean(),
        batch_size=2,
    )
    run = bench([workload], FAKE_CPU, rounds=2, timer=brief, profiled_steps=1, retry_noisy=2)
    (result,) = run.results
    assert result.retries == 1 and result.rounds[1].noise == QUIET


def test_retry_noisy_takes_a_count(run_cli: RunCli, calibrated_cpu: Hardware) -> None:
    code, _, err = run_cli("bench", "mlp", "--hardware", "local", "--retry-noisy", "-1")
    assert code == 2 and "--retry-noisy -1 must be 0 or more" in err


def test_retry_noisy_alone_retries_twice() -> None:
    from lightspeed.cli import json_to_stdout

    assert json_to_stdout(["bench", "--retry-noisy", "mlp-tiny"]) == [
        "bench",
        "--retry-noisy=2",
        "mlp-tiny",
    ]
    assert json_to_stdout(["bench", "--retry-noisy"]) == ["bench", "--retry-noisy=2"]
    assert json_to_stdout(["bench", "--retry-noisy", "3", "--json"]) == [
        "bench",
        "--retry-noisy",
        "3",
        "--json=-",
    ]
