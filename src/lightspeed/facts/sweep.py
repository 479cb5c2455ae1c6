"""What a hyper-parameter sweep found (`lightspeed.workflows.sweep`): its search space, each trial's
hyper-parameters and final loss, the best trial, and the sweep's wall time beside what
the trials one after another would have taken."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from lightspeed.facts.timing import WorkloadInfo


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dimension:
    """One hyper-parameter of a search space.

    `kind`: "loguniform" or "uniform" (a float between `low` and `high`) or "choice"
    (one of `choices`). `text`: as the space was written ("lr=loguniform(1e-5,1e-2)").
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[float, ...] = ()
    text: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trial:
    """One trial: its number (the order the driver asked for it), the fused group that
    trained it (K trials a group), its hyper-parameters, and its loss at the last step
    (None where it diverged: a loss that is not finite)."""

    number: int
    group: int
    params: Mapping[str, float]
    loss: float | None

    @property
    def diverged(self) -> bool:
        return self.loss is None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SerialCheck:
    """Trials run again one at a time, each as the lone job it is fused from, to measure
    the serial sweep's time and check the fused losses: `trials` (their numbers),
    `seconds` (each one's wall time, model built and trained), `losses` (each one's
    final loss alone; None where it diverged)."""

    trials: tuple[int, ...]
    seconds: tuple[float, ...]
    losses: tuple[float | None, ...]

    @property
    def mean_s(self) -> float:
        return sum(self.seconds) / len(self.seconds) if self.seconds else 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sweep:
    """A sweep of `trials` trials of `steps` steps, packed `k` at a time into fused jobs.

    `wall_s`: the sweep's wall time, in seconds (the driver's asks and tells included,
    `driver_s` of it). `serial`: the sampled trials run one at a time. The serial sweep's
    wall time is estimated as their mean time × the trials + the driver's time.
    `best`: the number of the trial with the least final loss (None: every trial
    diverged). `sampler` and `seed`: the search driver and its seed. `failure`: the
    one-line error that stopped the sweep part-way (None: it finished).
    """

    workload: WorkloadInfo
    space: tuple[Dimension, ...]
    k: int
    steps: int
    trials: tuple[Trial, ...]
    best: int | None
    wall_s: float
    driver_s: float
    serial: SerialCheck | None
    sampler: str
    seed: int
    failure: str | None = None

    @property
    def serial_estimate_s(self) -> float | None:
        """Seconds the trials one after another would take (None: none sampled)."""
        if self.serial is None or not self.serial.seconds:
            return None
        return self.serial.mean_s * len(self.trials) + self.driver_s

    @property
    def speedup(self) -> float | None:
        """The serial sweep's estimated wall time over the fused sweep's."""
        serial = self.serial_estimate_s
        return None if serial is None or self.wall_s <= 0 else serial / self.wall_s

    @property
    def best_trial(self) -> Trial | None:
        return next((t for t in self.trials if t.number == self.best), None)
