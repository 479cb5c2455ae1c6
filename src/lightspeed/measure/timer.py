"""An honest timer: warm-up, device sync, adaptive blocks within a budget, every replicate kept.

Modelled on torch.utils.benchmark's `blocked_autorange`: each replicate times a block
of `steps_per_replicate` calls between two device synchronizations, so the timer's
own cost and the sync are amortised over calls that are too short to time one by one.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence

from lightspeed.errors import ConfigError

# A block shorter than this is dominated by the clock read and the device sync.
MIN_BLOCK_S = 5e-3
# Above this IQR/median the median is not a stable figure: a warning is attached.
NOISE_WARN_FRACTION = 0.10


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimerConfig:
    """How long and how often to time: `warmup_steps` untimed calls first, then blocks
    until `budget_s` seconds are spent, with at least `min_replicates` and at most
    `max_replicates` blocks."""

    warmup_steps: int = 3
    budget_s: float = 2.0
    min_replicates: int = 5
    max_replicates: int = 10_000

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ConfigError(f"--warmup {self.warmup_steps} must be 0 or more.")
        if not self.budget_s > 0:
            raise ConfigError(f"--budget {self.budget_s} must be a positive number of seconds.")
        if self.min_replicates < 1:
            raise ConfigError(f"--min-replicates {self.min_replicates} must be at least 1.")
        if self.max_replicates < self.min_replicates:
            raise ConfigError("max_replicates must be at least min_replicates.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """Timings of one callable: per-call seconds of every replicate, and their statistics.

    `times_s[i]` is the mean time of one call within replicate i (a block of
    `steps_per_replicate` calls). All figures are seconds per call.
    """

    times_s: tuple[float, ...]
    steps_per_replicate: int
    warmup_steps: int

    def __post_init__(self) -> None:
        if not self.times_s:
            raise ValueError("a Measurement needs at least one replicate")

    @property
    def n(self) -> int:
        """Number of replicates."""
        return len(self.times_s)

    @property
    def total_steps(self) -> int:
        """Calls timed across all replicates (warm-up excluded)."""
        return self.n * self.steps_per_replicate

    @property
    def total_time_s(self) -> float:
        """Wall time of all timed calls, in seconds."""
        return sum(self.times_s) * self.steps_per_replicate

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def mean_s(self) -> float:
        """Total time over total calls: the figure throughput is computed from."""
        return self.total_time_s / self.total_steps

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        return max(self.times_s)

    @property
    def iqr_s(self) -> float:
        """Interquartile range (75th − 25th percentile) of the replicates, in seconds."""
        if self.n < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times_s, n=4, method="inclusive")
        return q3 - q1

    @property
    def warnings(self) -> tuple[str, ...]:
        """Reasons not to trust the median as it stands."""
        found = []
        if self.n < 4:
            found.append(f"only {self.n} replicates: raise --budget for a reliable spread")
        if self.median_s > 0 and self.iqr_s / self.median_s > NOISE_WARN_FRACTION:
            found.append(
                f"noisy: IQR is {100 * self.iqr_s / self.median_s:.0f}% of the median;"
                " close other programs or raise --budget"
            )
        return tuple(found)

    def per_second(self, units_per_call: float) -> float:
        """Throughput: units processed in all timed calls over their total time."""
        return units_per_call * self.total_steps / self.total_time_s


def measure(
    fn: Callable[[], object],
    *,
    sync: Callable[[], None],
    config: TimerConfig | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Time `fn()`: warm up, size blocks to `MIN_BLOCK_S`, replicate within the budget.

    `sync` waits for the device; it is called before each clock read so that
    asynchronous work is inside the timed region it belongs to.
    """
    cfg = config or TimerConfig()
    start = clock()
    last_call_s = 0.0
    for _ in range(cfg.warmup_steps):
        last_call_s = _time_block(fn, 1, sync, clock)
    if cfg.warmup_steps == 0 or last_call_s <= 0.0:
        last_call_s = _time_block(fn, 1, sync, clock)
    steps = max(1, math.ceil(MIN_BLOCK_S / last_call_s)) if last_call_s > 0 else 1000

    times: list[float] = []
    deadline = start + cfg.budget_s
    while len(times) < cfg.max_replicates:
        times.append(_time_block(fn, steps, sync, clock) / steps)
        if len(times) >= cfg.min_replicates and clock() >= deadline:
            break
    return Measurement(
        times_s=tuple(times), steps_per_replicate=steps, warmup_steps=cfg.warmup_steps
    )


def _time_block(
    fn: Callable[[], object], steps: int, sync: Callable[[], None], clock: Callable[[], float]
) -> float:
    sync()
    t0 = clock()
    for _ in range(steps):
        fn()
    sync()
    return clock() - t0


def measurement_from_times(times_s: Sequence[float], steps_per_replicate: int = 1) -> Measurement:
    """A Measurement of already-taken per-call times (seconds)."""
    return Measurement(
        times_s=tuple(float(t) for t in times_s),
        steps_per_replicate=steps_per_replicate,
        warmup_steps=0,
    )
