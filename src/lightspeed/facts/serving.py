"""Serving facts: how long a model's forward takes at each batch size (ℓ(b), Nexus's
latency profile), with what it computes and its speed of light."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics

from lightspeed.facts.profile import Prediction


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchLatency:
    """One batch size's inference latency: every timed call's seconds (`latencies_s`,
    each call timed alone between device synchronisations), the forward's FLOPs and
    bytes moved, its speed of light on the hardware in seconds (None: not placed), and
    its peak memory in bytes (None: not measured on this device)."""

    batch_size: int
    latencies_s: tuple[float, ...]
    flops: int
    bytes: int
    sol_time_s: float | None = None
    peak_memory_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1 or not self.latencies_s:
            raise ValueError("a batch latency needs a batch size of at least 1 and a timed call")

    @functools.cached_property
    def median_s(self) -> float:
        """The median call, in seconds."""
        return statistics.median(self.latencies_s)

    @property
    def mean_s(self) -> float:
        """The mean call, in seconds."""
        return statistics.fmean(self.latencies_s)

    @property
    def std_s(self) -> float:
        """The calls' standard deviation, in seconds (0 for a single call)."""
        return statistics.stdev(self.latencies_s) if len(self.latencies_s) > 1 else 0.0

    @functools.cached_property
    def p99_s(self) -> float:
        """The 99th percentile call, in seconds: the nearest-rank value, so it is a call
        that happened (the slowest one below 100 calls)."""
        ordered = sorted(self.latencies_s)
        return ordered[math.ceil(0.99 * len(ordered)) - 1]

    @property
    def throughput_per_s(self) -> float:
        """Samples a second at the median latency: b / ℓ(b)."""
        return self.batch_size / self.median_s

    @property
    def fraction_of_sol(self) -> float | None:
        """The speed of light over the median latency (0–1); None when not placed."""
        return None if self.sol_time_s is None else self.sol_time_s / self.median_s


@dataclasses.dataclass(frozen=True, kw_only=True)
class LatencyProfile:
    """A model's forward timed at several batch sizes on one device and hardware: what
    `lightspeed serve-profile` measures. `threads`: torch's intra-op threads (CPU).
    `predicted_from`: the hardware id it was measured on when it is a prediction for
    `hardware_id` (`LatencyForecast`); None when measured."""

    name: str
    target: str | None
    device: str
    hardware_id: str
    threads: int
    batches: tuple[BatchLatency, ...]
    predicted_from: str | None = None

    def at(self, batch_size: int) -> BatchLatency | None:
        """The latency of `batch_size`, if it was timed."""
        return next((b for b in self.batches if b.batch_size == batch_size), None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LatencyForecast:
    """A latency profile predicted with changes (other hardware, autocast precision)
    from a measured one. `latency`: ℓ(b) as predicted, each measured call of a batch
    size scaled by its entry of `scales` (the forward's predicted time over its measured
    time, the forward profiled op by op as a step); `prediction`: how, for the last
    batch size (changes, source hardware, rules, assumptions, each kind of op carried)."""

    latency: LatencyProfile
    scales: tuple[float, ...]
    prediction: Prediction

    def __post_init__(self) -> None:
        if len(self.scales) != len(self.latency.batches):
            raise ValueError("a latency forecast needs one scale per batch size")
