"""What was run and how long its step took: `WorkloadInfo`, `Measurement`, `StepTiming`."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from lightspeed.dtypes import Precision, StepDtype
from lightspeed.facts.device import Device

# Above this IQR/median the median is not a stable figure: a warning is attached.
NOISE_WARN_FRACTION = 0.10
# A step that spends more than this share of its CPU time in the OS kernel, with more
# page faults a step than PAGE_FAULTS_WARN, is paying to fault its memory in again every
# step (glibc returning it to the OS): 10⁵ faults a step cost a 110 M-parameter
# encoder 300–450 ms of a 1.4 s step on a shared 2-core guest.
KERNEL_SHARE_WARN = 0.10
PAGE_FAULTS_WARN = 1000
# A canary kernel timed before and after a measurement whose rates differ by more than
# this fraction says the machine's speed changed while it was measured. Shared guests
# drift by up to 1.5× over minutes; a quarter is beyond what one quiet minute shows.
CANARY_DRIFT_FRACTION = 0.25
# CPU time the hypervisor gave to other guests while this one wanted it, as a share of
# all CPU time over the measurement: above it, neighbours slowed the measurement.
STEAL_WARN_SHARE = 0.05


def speed_change(ratio: float) -> str:
    """A rate that became `ratio` times what it was, in words: `21× faster` from twice
    on (a percentage over 100 reads badly), else `30% faster` or `60% slower`."""
    if ratio >= 2:
        times = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}".removesuffix(".0")
        return f"{times}× faster"
    return f"{100 * abs(ratio - 1):.0f}% {'faster' if ratio > 1 else 'slower'}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoiseCheck:
    """Was the machine quiet while something was measured?

    `canary_before_per_s` and `canary_after_per_s` are the rates (FLOP/s) of one fixed
    kernel timed just before and just after; `steal_share` is the share of CPU time
    stolen by the hypervisor in between, where the OS reports it (Linux guests);
    `load_average` the 1-minute load average at the end, beside `cpu_count`.
    """

    canary_before_per_s: float | None = None
    canary_after_per_s: float | None = None
    steal_share: float | None = None
    load_average: float | None = None
    cpu_count: int | None = None

    @property
    def canary_drift(self) -> float | None:
        """How far the after-canary moved from the before-canary: after/before − 1."""
        if not self.canary_before_per_s or not self.canary_after_per_s:
            return None
        return self.canary_after_per_s / self.canary_before_per_s - 1

    @property
    def warnings(self) -> tuple[str, ...]:
        """Reasons to think the machine was not quiet."""
        found = []
        drift = self.canary_drift
        if drift is not None and abs(drift) > CANARY_DRIFT_FRACTION:
            found.append(
                f"the machine's speed changed while measuring: a canary kernel ran"
                f" {speed_change(1 + drift)} after than before, so the timings may be off by"
                " as much; measure again when it is quiet"
            )
        if self.steal_share is not None and self.steal_share > STEAL_WARN_SHARE:
            found.append(
                f"the hypervisor gave {100 * self.steal_share:.0f}% of this machine's CPU"
                " time to other guests while measuring (steal time): neighbours slowed it"
            )
        if (
            self.load_average is not None
            and self.cpu_count is not None
            and self.load_average > self.cpu_count + 1
        ):
            found.append(
                f"the machine is busy: load average {self.load_average:.1f} on"
                f" {self.cpu_count} CPUs"
            )
        return tuple(found)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """Timings of one callable: per-call seconds of every replicate, and their statistics.

    `times_s[i]` is the mean time of one call within replicate i (a block of
    `steps_per_replicate` calls). All figures are seconds per call.
    """

    times_s: tuple[float, ...]
    steps_per_replicate: int
    warmup_steps: int
    noise: NoiseCheck | None = None
    # Seconds spent warming up, and whether the time per call stopped drifting before
    # timing began (None: the timer did not wait for it).
    warmup_s: float | None = None
    settled: bool | None = None
    # Minor page faults per timed call, and the share of the process's CPU time spent in
    # the OS kernel while timing (None where the OS does not report them).
    page_faults_per_call: float | None = None
    kernel_cpu_share: float | None = None
    # Whether the C library's allocator kept freed memory in the process while timing
    # (measure/allocator.py); None: not asked.
    freed_memory_kept: bool | None = None

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
        if self.settled is False:
            found.append(
                f"the step time was still drifting after {self.warmup_steps} warm-up steps"
                f" ({self.warmup_s or 0:.1f} s): a long run may step faster than measured"
            )
        if (
            self.kernel_cpu_share is not None
            and self.kernel_cpu_share > KERNEL_SHARE_WARN
            and (self.page_faults_per_call or 0) > PAGE_FAULTS_WARN
        ):
            cost = (
                f"{100 * self.kernel_cpu_share:.0f}% of the CPU time went to the OS kernel,"
                f" with {self.page_faults_per_call:,.0f} page faults a step"
            )
            found.append(
                f"{cost} although freed memory was kept in the process: the step touches"
                " memory it has not touched before on every step"
                if self.freed_memory_kept
                else f"{cost}: the allocator returns the step's memory to the OS and faults"
                " it in again every step (with glibc, MALLOC_TRIM_THRESHOLD_=1099511627776"
                " MALLOC_MMAP_MAX_=0 in the environment, or jemalloc or tcmalloc preloaded,"
                " avoid it)"
            )
        if self.noise is not None:
            found.extend(self.noise.warnings)
        return tuple(found)

    def per_second(self, units_per_call: float) -> float:
        """Throughput: units processed in all timed calls over their total time."""
        return units_per_call * self.total_steps / self.total_time_s


def measurement_from_times(times_s: Sequence[float], steps_per_replicate: int = 1) -> Measurement:
    """A Measurement of already-taken per-call times (seconds)."""
    return Measurement(
        times_s=tuple(float(t) for t in times_s),
        steps_per_replicate=steps_per_replicate,
        warmup_steps=0,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadInfo:
    """What was run: the workload's name and shape, and where and how it ran."""

    name: str
    batch_size: int
    device: Device
    precision: Precision
    parameter_count: int | None
    tokens_per_sample: int | None = None
    # Trainable parameter tensors (a tied one counted once): what an optimizer loops over.
    parameter_tensors: int | None = None
    # The TARGET it was loaded from (`Workload.target`), to load it again; None: built in code.
    target: str | None = None
    # Training jobs one step trains (fused jobs), each on `batch_size` samples.
    jobs: int = 1
    # Whether the step ran under autocast to `precision` with fp32 parameters and batch
    # (mixed precision), or with all of them cast to it (`StepDtype`).
    mixed: bool = False

    def __post_init__(self) -> None:
        if self.mixed:  # only bf16 and fp16 are autocast to
            StepDtype.of(self.precision, mixed=True)

    @property
    def dtype(self) -> StepDtype:
        """How the step ran in its precision: `--dtype` as given."""
        return StepDtype.of(self.precision, mixed=self.mixed)

    @property
    def samples_per_step(self) -> int:
        """Samples one step trains: every job's batch."""
        return self.batch_size * self.jobs


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepTiming:
    """The measured time of one training step of a workload."""

    workload: WorkloadInfo
    measurement: Measurement

    @property
    def samples_per_s(self) -> float:
        """Samples per second: all samples stepped over the total timed seconds."""
        return self.measurement.per_second(self.workload.samples_per_step)

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens per second, where the workload says how many tokens a sample holds."""
        if self.workload.tokens_per_sample is None:
            return None
        return self.samples_per_s * self.workload.tokens_per_sample
