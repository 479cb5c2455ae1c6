"""An honest timer: warm-up, device sync, adaptive blocks within a budget, every replicate kept.

Modelled on torch.utils.benchmark's `blocked_autorange`: each replicate times a block
of `steps_per_replicate` calls between two device synchronizations, so the timer's
own cost and the sync are amortised over calls that are too short to time one by one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

from lightspeed.errors import ConfigError
from lightspeed.facts.timing import Measurement

# A block shorter than this is dominated by the clock read and the device sync.
MIN_BLOCK_S = 5e-3


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
