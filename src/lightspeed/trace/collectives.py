"""Collectives across ranks: how long the early ranks wait in each one for the last.

Every rank of a process group calls its collectives in the same order, so the k-th
kernel of a given name in a step on one rank is the k-th of that name on every other.
A collective's kernel starts when its rank arrives and ends, on every rank, once the
last rank has arrived and the data has moved; so across ranks its duration differs
by how much earlier each rank arrived. The spread of durations (longest − shortest)
is the time the first rank to arrive waited for the last, and the rank with the
shortest kernel is the one that arrived last. Durations need no common clock, so
traces recorded on different hosts compare as well as those from one.

Point-to-point kernels (NCCL's SendRecv, which all-to-all also uses) are matched the
same way; between pipeline stages, where only pairs of ranks take part, the matching
of such kernels across all ranks means less.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from typing import TypeVar

import numpy as np

from lightspeed.trace.events import US, FloatArray
from lightspeed.trace.names import KernelType
from lightspeed.trace.window import DeviceEvents, StepsContext, WindowAnalyzer

_N = TypeVar("_N", int, float)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CommEvents:
    """One rank's communication kernels in one window, in start order (µs)."""

    names: tuple[str, ...]
    start_us: FloatArray
    dur_us: FloatArray

    @classmethod
    def empty(cls) -> CommEvents:
        return cls(names=(), start_us=np.zeros(0), dur_us=np.zeros(0))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectiveSkew:
    """One communication kernel name across ranks.

    `matched`: instances found on every rank; `unmatched`: instances on some ranks
    beyond what every rank has (their counts differ). `spread_s` and `max_spread_s`:
    total and largest duration spread over the matched instances, seconds (the first
    arrival's wait for the last). `wait_s`: each rank's total wait (its duration −
    the shortest); `last_arrivals`: how often each rank arrived last (instances whose
    durations are all equal count for no one).
    """

    name: str
    matched: int
    unmatched: int
    spread_s: float
    max_spread_s: float
    wait_s: dict[int, float]
    last_arrivals: dict[int, int]

    @property
    def mean_spread_s(self) -> float:
        return self.spread_s / self.matched if self.matched else 0.0


def match_collectives(per_rank: Mapping[int, CommEvents]) -> list[CollectiveSkew]:
    """Each communication kernel name of `per_rank` (one window of each rank) matched
    across the ranks by order, the largest total spread first."""
    ranks = sorted(per_rank)
    if len(ranks) < 2:
        return []
    by_name: dict[str, list[FloatArray]] = {}
    for rank in ranks:
        events = per_rank[rank]
        names = np.array(events.names, dtype=object)
        for name in dict.fromkeys(events.names):
            by_name.setdefault(name, []).append(events.dur_us[names == name])
    result = []
    for name, durations in by_name.items():
        counts = [len(d) for d in durations]
        n = min(counts) if len(durations) == len(ranks) else 0
        unmatched = sum(counts) - n * len(durations)
        matched = np.stack([d[:n] for d in durations]) if n else np.zeros((len(ranks), 0))
        result.append(_skew(name, ranks, matched, unmatched))
    return sorted(result, key=lambda s: (-s.spread_s, s.name))


def _skew(name: str, ranks: list[int], dur_us: FloatArray, unmatched: int) -> CollectiveSkew:
    """The CollectiveSkew of matched durations `dur_us` (ranks × instances)."""
    shortest = dur_us.min(axis=0, initial=np.inf)
    spread = dur_us.max(axis=0, initial=-np.inf) - shortest
    # Equal durations name no one last (argmin would always pick the first rank).
    late = dur_us.argmin(axis=0)[spread > 0] if dur_us.size else np.zeros(0, dtype=np.int64)
    last = np.bincount(late, minlength=len(ranks))
    return CollectiveSkew(
        name=name,
        matched=dur_us.shape[1],
        unmatched=unmatched,
        spread_s=float(spread.sum()) * US,
        max_spread_s=float(spread.max(initial=0.0)) * US,
        wait_s={r: float((dur_us[i] - shortest).sum()) * US for i, r in enumerate(ranks)},
        last_arrivals={r: int(last[i]) for i, r in enumerate(ranks)},
    )


def merge(skews: Iterable[CollectiveSkew]) -> list[CollectiveSkew]:
    """Skews of the same name (from several windows) summed into one per name, the
    largest total spread first."""
    merged: dict[str, CollectiveSkew] = {}
    for s in skews:
        old = merged.get(s.name)
        if old is None:
            merged[s.name] = s
            continue
        merged[s.name] = CollectiveSkew(
            name=s.name,
            matched=old.matched + s.matched,
            unmatched=old.unmatched + s.unmatched,
            spread_s=old.spread_s + s.spread_s,
            max_spread_s=max(old.max_spread_s, s.max_spread_s),
            wait_s=_add(old.wait_s, s.wait_s),
            last_arrivals=_add(old.last_arrivals, s.last_arrivals),
        )
    return sorted(merged.values(), key=lambda s: (-s.spread_s, s.name))


def summed(per_rank: Iterable[Mapping[int, _N]]) -> dict[int, _N]:
    """Per-rank figures (waits, last arrivals) summed rank by rank."""
    total: dict[int, _N] = {}
    for figures in per_rank:
        total = _add(total, figures)
    return total


def _add(a: Mapping[int, _N], b: Mapping[int, _N]) -> dict[int, _N]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted(set(a) | set(b))}


def comm_events(ev: DeviceEvents, names: tuple[str, ...]) -> CommEvents:
    """The communication kernels of one window's device events, in start order."""
    rows = np.flatnonzero(ev.is_type(KernelType.COMMUNICATION))
    rows = rows[np.argsort(ev.start_us[rows], kind="stable")]
    return CommEvents(
        names=tuple(names[i] for i in ev.name[rows]),
        start_us=ev.start_us[rows],
        dur_us=ev.end_us[rows] - ev.start_us[rows],
    )


def comm_events_steps(sc: StepsContext) -> list[CommEvents]:
    """`comm_events` of each of many steps at once."""
    ev, names = sc.events, sc.trace.trace.names
    rows = np.flatnonzero(ev.is_type(KernelType.COMMUNICATION))
    rows = rows[np.lexsort((ev.start_us[rows], sc.owner[rows]))]
    bounds = np.searchsorted(sc.owner[rows], np.arange(len(sc) + 1))
    start, dur = ev.start_us[rows], ev.end_us[rows] - ev.start_us[rows]
    every = [names[i] for i in ev.name[rows].tolist()]
    return [
        CommEvents(names=tuple(every[a:b]), start_us=start[a:b], dur_us=dur[a:b])
        for a, b in itertools.pairwise(bounds.tolist())
    ]


# For matching collectives across ranks; not written on its own.
COMM = WindowAnalyzer(
    key="comm",
    analyse=lambda w: comm_events(w.events, w.trace.trace.names),
    analyse_steps=comm_events_steps,
)
