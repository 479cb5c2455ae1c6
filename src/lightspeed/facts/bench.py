"""`BenchResult` and `BenchRun`: the suite's workloads, each profiled once and timed in
interleaved rounds, on one machine at one moment.

A bench times every workload in rounds (round r times each workload before round r + 1
times any) so that the machine's drift between minutes shows as a spread between a
workload's rounds, which the replicates of one timing cannot show. The step time of a
workload is the median of its rounds' medians.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.facts.timing import Measurement, NoiseCheck, WorkloadInfo

# The fewest rounds whose spread measures the drift between minutes.
MIN_ROUNDS = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchResult:
    """One workload of a bench: its profile (whose timing is the first round), the
    timings of the later rounds, the one-line reason it failed, if it did, and how many
    times its rounds whose noise check failed were timed again (`bench --retry-noisy`)."""

    workload: WorkloadInfo
    profile: Profile | None
    rounds: tuple[Measurement, ...] = ()
    failure: str | None = None
    retries: int = 0

    @property
    def noise_warnings(self) -> tuple[str, ...]:
        """What the noise checks of its rounds said, "round N: …" each; empty when the
        machine was quiet through every round (or was not checked)."""
        return round_noise_warnings([m.noise for m in self.rounds])

    @property
    def round_medians_s(self) -> tuple[float, ...]:
        """Each round's median step time, in seconds, in the order they ran."""
        return tuple(m.median_s for m in self.rounds)

    @property
    def step_s(self) -> float | None:
        """The median of the rounds' medians, in seconds; None with no round timed."""
        medians = self.round_medians_s
        return statistics.median(medians) if medians else None

    @property
    def round_spread(self) -> float | None:
        """(slowest − fastest round median) / their median: the drift between rounds,
        a fraction; None with fewer than two rounds."""
        medians = self.round_medians_s
        step = self.step_s
        if len(medians) < 2 or not step:
            return None
        return (max(medians) - min(medians)) / step


def round_noise_warnings(checks: Sequence[NoiseCheck | None]) -> tuple[str, ...]:
    """The warnings of each round's noise check (`checks[i]` of round i + 1), each as
    "round N: warning"; a round not checked has none."""
    return tuple(
        f"round {number}: {warning}"
        for number, check in enumerate(checks, start=1)
        if check is not None
        for warning in check.warnings
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchRun:
    """A bench run: its results in the order asked for, the hardware they were placed
    on, the size of the suite (`tiny` or `full`), the rounds and intra-op threads, and
    the environment a comparison needs (torch's version, the user's git commit)."""

    results: tuple[BenchResult, ...]
    hardware: Hardware
    size: str
    rounds: int
    threads: int
    torch_version: str | None = None
    git_commit: str | None = None  # of the repository the bench ran in, if any
