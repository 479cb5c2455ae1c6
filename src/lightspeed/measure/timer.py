"""An honest timer: warm-up until settled, device sync, adaptive blocks within a budget,
every replicate kept.

Modelled on torch.utils.benchmark's `blocked_autorange`: each replicate times a block
of `steps_per_replicate` calls between two device synchronizations, so the timer's
own cost and the sync are amortised over calls that are too short to time one by one.

A freshly built training step runs slower for some steps: optimizer state is created
and pages are touched for the first time (2–9 steps on a 110 M-parameter encoder on a
CPU). So after `warmup_steps` the timer keeps warming up, in blocks, until the median of
the `SETTLE_WINDOW` blocks before the last `SETTLE_WINDOW` is no more than
`settle_tolerance` slower than theirs (the step time has stopped falling), or
`max_settle_s` has passed (15 s unless `$LIGHTSPEED_MAX_SETTLE_S` says otherwise: a
test suite or a CI job that times many tiny steps caps the wait there); the result says
whether it settled. The last window, steady
by that test and timed in blocks as replicates are, counts as the first `SETTLE_WINDOW`
replicates (within the budget). What a step's memory
costs once it is warm depends on the allocator, which the step timer sets first
(measure/allocator.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections.abc import Callable
from types import ModuleType

from lightspeed.errors import ConfigError
from lightspeed.facts.timing import Measurement

resource: ModuleType | None
try:
    import resource
except ImportError:  # not on this OS (Windows): no page-fault or CPU-time counts
    resource = None

# A block shorter than this is dominated by the clock read and the device sync.
MIN_BLOCK_S = 5e-3
# Blocks per window compared when deciding whether the warm-up has settled.
SETTLE_WINDOW = 3
# The longest wait for the warm-up to settle, in seconds, unless the environment says.
MAX_SETTLE_S = 15.0
MAX_SETTLE_ENV = "LIGHTSPEED_MAX_SETTLE_S"


def default_max_settle_s() -> float:
    """The longest wait for the warm-up to settle, in seconds: `$LIGHTSPEED_MAX_SETTLE_S`
    where set, else `MAX_SETTLE_S`."""
    value = os.environ.get(MAX_SETTLE_ENV)
    if not value:
        return MAX_SETTLE_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigError(
            f"{MAX_SETTLE_ENV}={value!r} is not a number of seconds: set it to 0 or more,"
            " or unset it for the default of 15."
        )
    return seconds


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimerConfig:
    """How long and how often to time: at least `warmup_steps` untimed calls first, then
    untimed blocks until the time per call settles (within `settle_tolerance`, for at
    most `max_settle_s` seconds; 0 turns settling off), then blocks until `budget_s`
    seconds are spent, with at least `min_replicates` and at most `max_replicates`."""

    warmup_steps: int = 3
    budget_s: float = 2.0
    min_replicates: int = 5
    max_replicates: int = 10_000
    max_settle_s: float = dataclasses.field(default_factory=default_max_settle_s)
    settle_tolerance: float = 0.05

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ConfigError(f"--warmup {self.warmup_steps} must be 0 or more.")
        if not self.budget_s > 0:
            raise ConfigError(f"--budget {self.budget_s} must be a positive number of seconds.")
        if self.min_replicates < 1:
            raise ConfigError(f"--min-replicates {self.min_replicates} must be at least 1.")
        if self.max_replicates < self.min_replicates:
            raise ConfigError("max_replicates must be at least min_replicates.")
        if self.max_settle_s < 0 or not self.settle_tolerance > 0:
            raise ConfigError("max_settle_s must be 0 or more and settle_tolerance positive.")


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
    warmup = [_time_block(fn, 1, sync, clock) for _ in range(cfg.warmup_steps)]
    if not warmup or warmup[-1] <= 0.0:
        warmup.append(_time_block(fn, 1, sync, clock))
    last_call_s = warmup[-1]
    steps = max(1, math.ceil(MIN_BLOCK_S / last_call_s)) if last_call_s > 0 else 1000
    warmup_calls = len(warmup)
    settled: bool | None = None
    settle_blocks = 0  # warm-up blocks of `steps` calls, timed as replicates are
    if cfg.max_settle_s > 0:
        settled = False
        settle_deadline = clock() + cfg.max_settle_s
        while not (settled := has_settled(warmup, cfg.settle_tolerance)):
            if clock() >= settle_deadline:
                break
            warmup.append(_time_block(fn, steps, sync, clock) / steps)
            warmup_calls += steps
            settle_blocks += 1
    warmup_s = clock() - start

    # The window that showed the time had settled is steady by that test, and was timed
    # as replicates are: it counts as the first replicates (a step of seconds then costs
    # two more steps to time rather than five).
    reused = 0
    if settled and settle_blocks >= SETTLE_WINDOW and cfg.max_replicates > SETTLE_WINDOW:
        reused = SETTLE_WINDOW
    times = warmup[len(warmup) - reused :]
    warmup_calls -= reused * steps
    warmup_s -= sum(times) * steps
    usage_before = _usage()
    deadline = clock() + cfg.budget_s - sum(times) * steps
    while len(times) < cfg.max_replicates:
        times.append(_time_block(fn, steps, sync, clock) / steps)
        if len(times) >= cfg.min_replicates and clock() >= deadline:
            break
    usage_after = _usage()
    faults = kernel_share = None
    if usage_before is not None and usage_after is not None:
        # Counted over the blocks timed here, not the warm-up blocks reused.
        faults = (usage_after[0] - usage_before[0]) / ((len(times) - reused) * steps)
        cpu_s = (usage_after[1] - usage_before[1]) + (usage_after[2] - usage_before[2])
        kernel_share = (usage_after[2] - usage_before[2]) / cpu_s if cpu_s > 0 else None
    return Measurement(
        times_s=tuple(times),
        steps_per_replicate=steps,
        warmup_steps=warmup_calls,
        warmup_s=warmup_s,
        settled=settled,
        page_faults_per_call=faults,
        kernel_cpu_share=kernel_share,
    )


def _usage() -> tuple[int, float, float] | None:
    """(minor page faults, user CPU s, kernel CPU s) of this process so far, where the
    OS reports them."""
    if resource is None:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_utime, usage.ru_stime


def has_settled(per_call_s: list[float], tolerance: float) -> bool:
    """Whether a warm-up's times per call (one per call or block, oldest first) have
    stopped falling: the median of the `SETTLE_WINDOW` before the last `SETTLE_WINDOW`
    no more than `tolerance` (a fraction) slower than theirs. Warming up only makes
    early calls slower, so a slower last window is noise, not drift."""
    if len(per_call_s) < 2 * SETTLE_WINDOW:
        return False
    last = statistics.median(per_call_s[-SETTLE_WINDOW:])
    before = statistics.median(per_call_s[-2 * SETTLE_WINDOW : -SETTLE_WINDOW])
    return last > 0 and before <= last * (1 + tolerance)


def _time_block(
    fn: Callable[[], object], steps: int, sync: Callable[[], None], clock: Callable[[], float]
) -> float:
    sync()
    t0 = clock()
    for _ in range(steps):
        fn()
    sync()
    return clock() - t0
