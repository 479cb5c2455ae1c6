"""When a server runs its next batch: an SLO-aware policy and the fixed batch + timeout
that LitServe, Ray Serve and BentoML configure, and an event simulation of one worker
under either.

SLO-aware (Nexus's early drop): a free worker runs what waits at once, as one batch
of up to `max_batch`; the oldest requests that would miss their deadline in that batch
are dropped first, each leaving its place to a request that can make it. Nothing waits
on a free worker: requests that arrive during a batch's run form the next one, so a
light load runs small batches at once and a heavy one large batches, with no knob but
the SLO. Neither does the batch shrink to save its oldest request: a smaller batch
answers fewer a second, the queue grows and more miss (holding a lone request for
company is no better: when ℓ(b) hardly grows with b it gains nothing, and a wake-up a
millisecond late misses it).

Fixed: the waiting requests run once `max_batch` of them wait or the oldest has waited
`timeout_s`; nothing is dropped.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence

Latency = Callable[[int], float]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """What a worker that is free does now: drop the `drop` oldest requests, run the
    next `run` oldest as one batch (0: none), and decide again at `wake_at_s` if
    nothing arrives before (None: only when something does)."""

    run: int
    drop: int = 0
    wake_at_s: float | None = None


def slo_aware(
    now_s: float, arrivals_s: Sequence[float], latency: Latency, slo_s: float, max_batch: int
) -> Decision:
    """The SLO-aware decision for the waiting requests' arrival times, oldest first
    (see the module's docstring)."""
    drop = 0
    while drop < len(arrivals_s):
        batch = min(len(arrivals_s) - drop, max_batch)
        if now_s + latency(batch) <= arrivals_s[drop] + slo_s:
            return Decision(run=batch, drop=drop)
        drop += 1
    return Decision(run=0, drop=drop)


def fixed(now_s: float, arrivals_s: Sequence[float], max_batch: int, timeout_s: float) -> Decision:
    """The fixed policy's decision: run when `max_batch` wait or the oldest has waited
    `timeout_s`."""
    if not arrivals_s:
        return Decision(run=0)
    if len(arrivals_s) >= max_batch or now_s >= arrivals_s[0] + timeout_s:
        return Decision(run=min(len(arrivals_s), max_batch))
    return Decision(run=0, wake_at_s=arrivals_s[0] + timeout_s)


Policy = Callable[[float, Sequence[float]], Decision]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Served:
    """One simulated run: requests offered, answered within the SLO, dropped, and the
    seconds simulated; goodput is the first over the last."""

    offered: int
    within_slo: int
    dropped: int
    duration_s: float
    latencies_s: tuple[float, ...]

    @property
    def goodput_per_s(self) -> float:
        """Requests answered within the SLO a second (drops count as misses)."""
        return self.within_slo / self.duration_s

    @property
    def fraction_within(self) -> float:
        """Answered within the SLO over offered (1 when none came)."""
        return self.within_slo / self.offered if self.offered else 1.0


def poisson_arrivals(rate_per_s: float, duration_s: float, seed: int = 0) -> list[float]:
    """Seconds at which requests arrive, a Poisson process at `rate_per_s`."""
    rng = random.Random(seed)
    arrivals, t = [], rng.expovariate(rate_per_s)
    while t < duration_s:
        arrivals.append(t)
        t += rng.expovariate(rate_per_s)
    return arrivals


def serve(arrivals_s: Sequence[float], policy: Policy, latency: Latency, slo_s: float) -> Served:
    """One worker serving requests arriving at `arrivals_s` (sorted) under `policy`,
    each batch of n taking `latency(n)`: an event simulation, deterministic. Requests
    still waiting when nothing more can happen count as misses."""
    pending: list[float] = []
    latencies: list[float] = []
    dropped, free_at, now, i = 0, 0.0, 0.0, 0

    def next_arrival() -> float:
        return arrivals_s[i] if i < len(arrivals_s) else math.inf

    while i < len(arrivals_s) or pending:
        if not pending:  # idle until the next request
            now = max(now, next_arrival())
        elif now < free_at:  # busy: until it is free or a request comes
            now = min(free_at, next_arrival())
        while i < len(arrivals_s) and arrivals_s[i] <= now:
            pending.append(arrivals_s[i])
            i += 1
        if now < free_at:
            continue
        decision = policy(now, pending)
        dropped += decision.drop
        del pending[: decision.drop]
        if decision.run:
            batch, pending = pending[: decision.run], pending[decision.run :]
            free_at = now + latency(len(batch))
            latencies += [free_at - arrived for arrived in batch]
            continue
        moment = min(decision.wake_at_s or math.inf, next_arrival())
        if math.isinf(moment):
            break
        now = max(now, moment)
    return Served(
        offered=len(arrivals_s),
        within_slo=sum(t <= slo_s for t in latencies),
        dropped=dropped,
        duration_s=max(arrivals_s[-1] if arrivals_s else 0.0, 1e-9),
        latencies_s=tuple(latencies),
    )
