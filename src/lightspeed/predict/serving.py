"""Serving plans under a latency SLO, from latency profiles (Nexus, SOSP'19).

A session is a model served at a request rate under a latency SLO. Its latency profile
ℓ(b) (`lightspeed serve-profile`) is read at its p99, interpolated linearly between the
batch sizes timed (and beyond the largest, along its last two), and never above a
larger batch's: a batch runs padded to the larger size when that is faster
(`padded_batch`). The plan:

- **Saturated GPUs.** A GPU serving one session runs its batches back to back; a
  request may wait a whole batch's run for its own to start, then its batch runs, so
  2·ℓ(b) ≤ SLO (Nexus). The largest such batch b* sets the rate one GPU takes: the
  rate whose arrivals during one batch's run reach b* only 1 % of the time (λ +
  2.33·√λ ≤ b* with λ = rate · ℓ(b*), the normal approximation of a Poisson count; a
  queue fed at its full capacity b*/ℓ(b*) grows without bound under random arrivals).
  A session takes as many whole GPUs of it as its rate fills.
- **The residual rate** gets a duty cycle d: every d seconds the requests that came
  in meanwhile run as one batch. Arrivals are random, so the batch planned for is what
  a cycle brings at its 99th percentile, b = ⌈λ + 2.33·√λ⌉ with λ = rate · d; a
  request waits at most d and runs ℓ(b), so d + ℓ(b) ≤ SLO, and ℓ(b) ≤
  `UTILISATION` · d. The cycle with the least occupancy ℓ(b)/d is kept.
- **Squishy bin packing.** Residual sessions, largest occupancy first, share a GPU
  where they fit: the shared duty cycle is the least of theirs, each session's batch
  shrinks to what arrives in it, and the batches' latencies must fit the cycle
  (Σ ℓᵢ(bᵢ) ≤ `UTILISATION` · d) while each meets its SLO with the whole cycle's
  batches run before its own (d + Σ ℓⱼ(bⱼ) ≤ SLOᵢ). A
  session goes where the GPU ends fullest (best fit), or to a GPU of its own.

`simulate` checks a plan by running it: seeded Poisson arrivals, each GPU's cycle
executed event by event, every request's latency counted against its SLO.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
from collections.abc import Sequence

from lightspeed.errors import ConfigError
from lightspeed.facts.serving import LatencyProfile

# The share of a GPU's time a plan fills: the rest absorbs random arrivals' bursts.
UTILISATION = 0.9


@dataclasses.dataclass(frozen=True, kw_only=True)
class Session:
    """A model served at `rate_per_s` requests a second, each to be answered within
    `slo_s` seconds, with its latency profile."""

    name: str
    latency: LatencyProfile
    rate_per_s: float
    slo_s: float

    def __post_init__(self) -> None:
        if not self.rate_per_s > 0 or not self.slo_s > 0:
            raise ConfigError(f"session {self.name!r}: its rate and SLO must be positive.")
        if not self.latency.batches:
            raise ConfigError(f"session {self.name!r}: its latency profile has no batch.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Share:
    """A session's part of one GPU: its batch each duty cycle, that batch's latency
    (seconds) and the request rate the GPU takes of it (per second)."""

    session: str
    batch_size: int
    latency_s: float
    rate_per_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuPlan:
    """One GPU: every `duty_cycle_s` seconds each share's batch runs once."""

    duty_cycle_s: float
    shares: tuple[Share, ...]
    saturated: bool

    @property
    def occupancy(self) -> float:
        """The share of its time the GPU computes full batches (0–1): 1 for a
        saturated GPU, which runs them back to back."""
        return sum(s.latency_s for s in self.shares) / self.duty_cycle_s


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServingPlan:
    """The GPUs a set of sessions needs, and the sessions no GPU can serve within their
    SLO (`largest_batch` finds none), by name."""

    gpus: tuple[GpuPlan, ...]
    unservable: tuple[str, ...] = ()


def latency_at(profile: LatencyProfile, batch_size: int) -> float:
    """ℓ(b) at its p99, in seconds, interpolated between the batch sizes timed, and run
    as `padded_batch` says: never more than a larger batch's."""
    return _interpolated(profile, padded_batch(profile, batch_size))


def padded_batch(profile: LatencyProfile, batch_size: int) -> int:
    """The batch `batch_size` requests run as: themselves, or padded to a larger batch
    size timed whose p99 is shorter (a kernel that serves large batches better than
    small ones, as CPU matrix products below 16 rows: padding then costs nothing)."""
    best, fastest = batch_size, _interpolated(profile, batch_size)
    for b in sorted(x.batch_size for x in profile.batches):
        if b > batch_size and (t := _interpolated(profile, b)) < fastest:
            best, fastest = b, t
    return best


def _interpolated(profile: LatencyProfile, batch_size: int) -> float:
    points = sorted((b.batch_size, b.p99_s) for b in profile.batches)
    if batch_size <= points[0][0]:
        return points[0][1]
    for (b0, t0), (b1, t1) in itertools.pairwise(points):
        if batch_size <= b1:
            return t0 + (t1 - t0) * (batch_size - b0) / (b1 - b0)
    if len(points) == 1:
        return points[0][1] * batch_size / points[0][0]
    (b0, t0), (b1, t1) = points[-2], points[-1]
    return t1 + (t1 - t0) / (b1 - b0) * (batch_size - b1)


def largest_batch(profile: LatencyProfile, slo_s: float) -> int | None:
    """The largest batch, up to the largest timed, with 2·ℓ(b) ≤ `slo_s`; None if not
    even one request can be served in time."""
    top = max(b.batch_size for b in profile.batches)
    fits = [b for b in range(1, top + 1) if 2 * latency_at(profile, b) <= slo_s]
    return max(fits) if fits else None


# A residual session: the session, the rate left to it and its own duty cycle.
_Residual = tuple[Session, float, float]


def replica_rate(latency: LatencyProfile, slo_s: float) -> float | None:
    """Requests a second one GPU serves of a model within `slo_s`: at its largest batch
    b* (2·ℓ(b*) ≤ SLO), the rate whose arrivals during one batch's run reach b* only 1 %
    of the time; None if not even one request makes the SLO."""
    best = largest_batch(latency, slo_s)
    if best is None:
        return None
    # λ + Z·√λ = b*: √λ = (−Z + √(Z² + 4·b*)) / 2
    arrivals = ((math.sqrt(Z_99**2 + 4 * best) - Z_99) / 2) ** 2
    return arrivals / latency_at(latency, best)


def plan(sessions: Sequence[Session]) -> ServingPlan:
    """The GPUs `sessions` need and what each runs (see the module's docstring)."""
    gpus: list[GpuPlan] = []
    residual: list[tuple[Session, float]] = []
    unservable = []
    for s in sessions:
        per_gpu = replica_rate(s.latency, s.slo_s)
        if per_gpu is None:
            unservable.append(s.name)
            continue
        full = int(s.rate_per_s // per_gpu)
        gpus += [_saturated(s, per_gpu)] * full
        left = s.rate_per_s - full * per_gpu
        if left > 1e-9:
            residual.append((s, left))
    alone: list[_Residual] = []
    for s, rate in residual:
        cycle = _own_cycle(s, rate)
        if cycle is None:  # no cycle of its own fits: a GPU running b* back to back
            gpus.append(_saturated(s, rate))
        else:
            alone.append((s, rate, cycle))
    alone.sort(key=lambda item: -_occupancy(*item))
    # Each shared GPU: its sessions (with their own cycles, found once) and its plan.
    bins: list[tuple[list[_Residual], GpuPlan]] = []
    for item in alone:
        fitting = [
            (g, gpu)
            for g, (group, _) in enumerate(bins)
            if (gpu := _fitted([*group, item])) is not None
        ]
        if fitting:
            g, gpu = max(fitting, key=lambda found: found[1].occupancy)
            bins[g] = ([*bins[g][0], item], gpu)
        else:
            gpu = _fitted([item])
            assert gpu is not None  # a session alone fits its own cycle
            bins.append(([item], gpu))
    gpus += [gpu for _, gpu in bins]
    return ServingPlan(gpus=tuple(gpus), unservable=tuple(unservable))


def _own_cycle(s: Session, rate: float) -> float | None:
    """The duty cycle serving `rate` of `s` alone at the least occupancy: the cycles
    from the SLO down in 2 % steps, each with the batch it plans for (`_batch`); None
    where none fits (a rate near what a saturated GPU sustains)."""
    best: tuple[float, float] | None = None
    top = largest_batch(s.latency, s.slo_s) or 1
    cycle = s.slo_s
    while cycle > s.slo_s * 1e-3:
        b = _batch(rate, cycle)
        run = latency_at(s.latency, b)
        fits = b <= top and cycle + run <= s.slo_s and run <= UTILISATION * cycle
        if fits and (best is None or run / cycle < best[0]):
            best = (run / cycle, cycle)
        cycle *= 0.98
    return None if best is None else best[1]


def _saturated(s: Session, rate: float) -> GpuPlan:
    """A GPU running `s`'s largest batch back to back, taking `rate` of it."""
    best = largest_batch(s.latency, s.slo_s)
    assert best is not None
    run = latency_at(s.latency, best)
    share = Share(session=s.name, batch_size=best, latency_s=run, rate_per_s=rate)
    return GpuPlan(duty_cycle_s=run, shares=(share,), saturated=True)


def _occupancy(s: Session, rate: float, cycle: float) -> float:
    return latency_at(s.latency, _batch(rate, cycle)) / cycle


# z of the 99th percentile of a normal: a cycle's Poisson arrivals λ exceed
# λ + Z_99·√λ about 1 % of the time (the normal approximation of a Poisson count).
Z_99 = 2.326


def _batch(rate: float, cycle: float) -> int:
    """The batch a cycle plans for: what arrives in it at its 99th percentile."""
    mean = rate * cycle
    return max(1, math.ceil(mean + Z_99 * math.sqrt(mean) - 1e-9))


def _fitted(group: Sequence[_Residual]) -> GpuPlan | None:
    """One GPU serving `group`, or None where their batches cannot fit one cycle within
    every SLO. A session alone runs at its own duty cycle; sessions sharing take the
    longest cycle that fits, from the least of their own down (shorter cycles leave room
    for the others' batches before each SLO), in 2 % steps."""
    cycle = min(own for _, _, own in group)
    while cycle > 1e-6:
        shares = []
        for s, rate, _ in group:
            b = _batch(rate, cycle)
            run = latency_at(s.latency, b)
            shares.append(Share(session=s.name, batch_size=b, latency_s=run, rate_per_s=rate))
        if len(group) == 1:
            return GpuPlan(duty_cycle_s=cycle, shares=tuple(shares), saturated=False)
        busy = sum(x.latency_s for x in shares)
        if busy <= UTILISATION * cycle and all(cycle + busy <= s.slo_s for s, _, _ in group):
            return GpuPlan(duty_cycle_s=cycle, shares=tuple(shares), saturated=False)
        if busy > UTILISATION * cycle and all(x.batch_size == 1 for x in shares):
            return None  # a shorter cycle only leaves less room for the same batches
        cycle *= 0.98
    return None


def one_model_per_gpu(sessions: Sequence[Session]) -> int:
    """GPUs batch-1 serving needs: each GPU runs one session's requests one at a time,
    at `UTILISATION` of 1/ℓ(1) requests a second."""
    return sum(math.ceil(s.rate_per_s / (UTILISATION / latency_at(s.latency, 1))) for s in sessions)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SessionOutcome:
    """A session's requests in a simulation (or a run for real): how many, and how many
    were answered within its SLO; a run for real also says how many were answered at
    all and the p99 of their latencies (seconds; None where none was)."""

    session: str
    requests: int
    within_slo: int
    answered: int | None = None
    p99_s: float | None = None

    @property
    def fraction_within(self) -> float:
        """Answered within the SLO over all (1 when none came)."""
        return self.within_slo / self.requests if self.requests else 1.0


def simulate(
    served: ServingPlan, sessions: Sequence[Session], *, duration_s: float, seed: int = 0
) -> tuple[SessionOutcome, ...]:
    """Run `served` for `duration_s` seconds of simulated time: each share's requests
    arrive as a Poisson process at its rate (a seeded generator, so the same plan gives
    the same outcome); each GPU starts a cycle every `duty_cycle_s` (or as soon as the
    last one's batches end), running each share's waiting requests — all that came,
    up to the session's `largest_batch`, as a batcher does — for ℓ of that many; a
    request counts within its SLO when it is answered in time."""
    by_name = {s.name: s for s in sessions}
    cap = {s.name: largest_batch(s.latency, s.slo_s) or 1 for s in sessions}
    rng = random.Random(seed)
    counts = {s.name: [0, 0] for s in sessions}
    for gpu in served.gpus:
        queues: list[list[float]] = []
        for share in gpu.shares:
            arrivals, t = [], rng.expovariate(share.rate_per_s)
            while t < duration_s:
                arrivals.append(t)
                t += rng.expovariate(share.rate_per_s)
            heapq.heapify(arrivals)
            queues.append(arrivals)
        start = 0.0
        while start < duration_s or any(q for q in queues):
            now = start
            for share, queue in zip(gpu.shares, queues, strict=True):
                taken: list[float] = []
                while queue and queue[0] <= now and len(taken) < cap[share.session]:
                    taken.append(heapq.heappop(queue))
                if not taken:
                    continue
                now += latency_at(by_name[share.session].latency, len(taken))
                slo = by_name[share.session].slo_s
                counts[share.session][0] += len(taken)
                counts[share.session][1] += sum(now - arrived <= slo for arrived in taken)
            start = max(start + gpu.duty_cycle_s, now)
            if start >= 10 * duration_s:  # an overloaded plan: what is left is missed
                for share, queue in zip(gpu.shares, queues, strict=True):
                    counts[share.session][0] += len(queue)
                break
    return tuple(
        SessionOutcome(session=name, requests=n, within_slo=ok) for name, (n, ok) in counts.items()
    )
