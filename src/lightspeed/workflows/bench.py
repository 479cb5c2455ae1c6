"""`bench`: the suite's workloads profiled once and timed in interleaved rounds.

Round 1 builds each workload and profiles it (`measure.profile_run.profile_prepared`:
its timing, by `lightspeed time`'s rules, is the round's); rounds 2… time each built
step again with the same timer, workload after workload, so drift between minutes lands
in every workload alike and shows as the spread between its rounds. A workload that
fails is kept with its one-line reason, and the others go on. Every built workload stays
in memory until the last round, and through the retries: with `retry_noisy`, a
workload whose noise check failed in a round (a busy machine, stolen CPU time, a canary
that moved) has that round timed again, up to N times, keeping the quieter timing.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from lightspeed import progress, suite
from lightspeed.errors import ConfigError, LightspeedError, ProfileIncomplete
from lightspeed.facts.bench import MIN_ROUNDS, BenchResult, BenchRun
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.facts.timing import Measurement, NoiseCheck
from lightspeed.measure.profile_run import profile_prepared
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.measure.timer import TimerConfig
from lightspeed.measure.workload_timing import time_step, workload_info
from lightspeed.workload import Workload

SIZES = ("tiny", "full")
TINY_SUFFIX = "-tiny"


def variants() -> dict[str, tuple[str, str]]:
    """Each model family of the suite → (its full-size name, its `-tiny` name): the
    family of `gpt2-tiny` is `gpt2`, whose full size is `gpt2-small`."""
    names = suite.names()
    found = {}
    for tiny in (n for n in names if n.endswith(TINY_SUFFIX)):
        family = tiny.removesuffix(TINY_SUFFIX)
        full = [n for n in names if n == family or (n.startswith(family + "-") and n != tiny)]
        if len(full) == 1:
            found[family] = (full[0], tiny)
    return found


def families() -> list[str]:
    """The suite's model families, sorted."""
    return sorted(variants())


def bench_names(names: Sequence[str], size: str, every: bool) -> list[str]:
    """The suite workloads a bench runs: every family (`every`) or the `names` given
    (families or workloads), each at `size`: "tiny", the family's `-tiny` variant;
    "full", its size as published."""
    if size not in SIZES:
        raise ConfigError(f"--size {size!r}: choose tiny or full.")
    if every and names:
        raise ConfigError("give workload names or --all, not both.")
    if not every and not names:
        raise ConfigError("name the workloads to bench, or pass --all.")
    sized = variants()
    of_name = {n: family for family, pair in sized.items() for n in pair}
    picked = []
    for name in families() if every else names:
        family = name if name in sized else of_name.get(name)
        if family is None:
            suite.get(name)  # not in the suite: one line with the closest name
            picked.append(name)  # in the suite, one size only
        else:
            picked.append(sized[family][0 if size == "full" else 1])
    return list(dict.fromkeys(picked))


def bench(
    workloads: Sequence[Workload],
    hardware: Hardware,
    settings: StepSettings | None = None,
    *,
    size: str = "tiny",
    rounds: int = MIN_ROUNDS,
    budget_s: float = 1.0,
    timer: TimerConfig | None = None,
    profiled_steps: int | None = None,
    retry_noisy: int = 0,
) -> BenchRun:
    """Profile each of `workloads` and time it in `rounds` interleaved rounds of
    `budget_s` seconds of timing each, placed on `hardware`. `timer` replaces the timing
    (its own budget, warm-up and replicates: a smoke run that only checks every workload
    runs); `profiled_steps` the steps each op is timed over (None: as a profile does);
    `retry_noisy` how many times, at most, the rounds whose noise check failed are timed
    again (`retry_noisy_rounds`)."""
    if rounds < 1:
        raise ConfigError(f"--rounds {rounds} must be at least 1.")
    if retry_noisy < 0:
        raise ConfigError(f"--retry-noisy {retry_noisy} must be 0 or more.")
    if len({w.name for w in workloads}) < len(workloads):
        raise ConfigError("a bench runs each workload once: two have the same name.")
    settings = settings or StepSettings()
    timer = timer or TimerConfig(budget_s=budget_s)
    results = {
        w.name: BenchResult(workload=workload_info(w, settings), profile=None) for w in workloads
    }
    built: dict[str, PreparedStep] = {}
    with progress.counting(len(workloads) * rounds) as advance:
        for round_number in range(1, rounds + 1):
            for workload in workloads:
                name = workload.name
                if results[name].failure is None:
                    with progress.stage(f"{name}, round {round_number} of {rounds}"):
                        results[name] = _run_round(
                            workload,
                            settings,
                            hardware,
                            timer,
                            results[name],
                            built,
                            profiled_steps,
                        )
                    if results[name].failure is not None:
                        built.pop(name, None)  # its memory back for the others
                advance()
    done = tuple(results[w.name] for w in workloads)
    if retry_noisy and any(r.noise_warnings for r in done):

        def retime(name: str) -> Measurement:
            with progress.stage(f"{name}, a noisy round again"):
                return time_step(built[name], timer).measurement

        done = retry_noisy_rounds(done, retime, retry_noisy)
    return BenchRun(
        results=done,
        hardware=hardware,
        size=size,
        rounds=rounds,
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        git_commit=git_commit(),
    )


def retry_noisy_rounds(
    results: Sequence[BenchResult], retime: Callable[[str], Measurement], times: int
) -> tuple[BenchResult, ...]:
    """`results` with each round whose noise check failed timed again by `retime`
    (a workload's name → a new timing of its step), up to `times` tries a workload, each
    round keeping the quieter of its timings (`_loudness`); a workload stops once quiet.
    A round-1 timing is its profile's timing too, so a quieter one replaces both."""
    done = []
    for result in results:
        for _ in range(times if result.failure is None else 0):
            if not result.noise_warnings:
                break
            try:
                result = _retried(result, retime)
            except LightspeedError:
                break  # it ran before: keep what it measured then
        done.append(result)
    return tuple(done)


def _retried(result: BenchResult, retime: Callable[[str], Measurement]) -> BenchResult:
    """One try: each noisy round of `result` timed again, the quieter timing kept."""
    rounds = list(result.rounds)
    profile = result.profile
    for index, old in enumerate(result.rounds):
        if old.noise is None or not old.noise.warnings:
            continue
        new = retime(result.workload.name)
        if _loudness(new.noise) < _loudness(old.noise):
            rounds[index] = new
            if index == 0 and profile is not None and profile.timing is old:
                profile = dataclasses.replace(profile, timing=new)
    return dataclasses.replace(
        result, rounds=tuple(rounds), profile=profile, retries=result.retries + 1
    )


def _loudness(check: NoiseCheck | None) -> tuple[int, float, float]:
    """How noisy a check says the machine was, to order timings by: its warnings, then
    how far its canary moved and the share of CPU time stolen."""
    if check is None:
        return (0, 0.0, 0.0)
    drift = abs(check.canary_drift or 0.0)
    return (len(check.warnings), drift, check.steal_share or 0.0)


def git_commit(directory: Path | None = None) -> str | None:
    """The commit checked out in the git repository around `directory` (default: the
    working directory), with "+" when it has uncommitted changes; None outside one."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=directory, capture_output=True, text=True, timeout=5, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "")


def _run_round(
    workload: Workload,
    settings: StepSettings,
    hardware: Hardware,
    timer: TimerConfig,
    result: BenchResult,
    built: dict[str, PreparedStep],
    profiled_steps: int | None,
) -> BenchResult:
    """One round of one workload: build and profile it the first time, time it after."""
    try:
        prepared = built.get(workload.name)
        if prepared is None:
            with progress.stage("building the model"):
                prepared = prepare(workload, settings)
            built[workload.name] = prepared
            profile = profile_prepared(
                prepared, hardware, timer=timer, profiled_steps=profiled_steps
            )
            assert profile.timing is not None
            return dataclasses.replace(
                result, workload=profile.workload, profile=profile, rounds=(profile.timing,)
            )
        timing = time_step(prepared, timer)
        return dataclasses.replace(result, rounds=(*result.rounds, timing.measurement))
    except ProfileIncomplete as exc:
        partial = exc.partial
        assert isinstance(partial, Profile)
        timed = () if partial.timing is None else (partial.timing,)
        return dataclasses.replace(result, profile=partial, rounds=timed, failure=str(exc))
    except LightspeedError as exc:
        return dataclasses.replace(result, failure=str(exc))
