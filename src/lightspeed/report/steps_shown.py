"""Which steps of a long trace a report lists, and what summarises the rest: the
terminal lists the first and last few steps and the slowest, with percentiles of step
time and each bound's count; JSON and HTML keep every step."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from lightspeed import units

# A trace with more steps than this lists a few of them in the terminal (the first and
# last, the slowest) and summarises the rest.
SHOWN_STEPS = 24
_ENDS, _SLOWEST = 5, 5


def shown_of(steps: int, which: str = "slowest") -> str:
    """What the terminal's list of a long trace's steps holds (`shown_indices`): `which`
    of its steps the few besides the ends are."""
    return f"{steps:,} steps, shown: the first and last {_ENDS} and the {_SLOWEST} {which}"


def shown_indices(
    times: Sequence[float], most: int = SHOWN_STEPS, ends: int = _ENDS, slowest: int = _SLOWEST
) -> list[int | None]:
    """Which of steps with these times a report lists, in step order: all of them up
    to `most`, else the first and last `ends` and the `slowest`, a None where steps
    are left out."""
    n = len(times)
    if n <= most:
        return list(range(n))
    longest = heapq.nlargest(slowest, range(n), key=times.__getitem__)
    keep = sorted({*range(ends), *range(n - ends, n), *longest})
    shown: list[int | None] = []
    for before, i in zip([-1, *keep], keep, strict=False):
        if i > before + 1:
            shown.append(None)
        shown.append(i)
    return shown


def percentiles_caption(times: Sequence[float], what: str = "step time") -> str:
    """The p50, p90, p99 and max of `times` (seconds; `what` they are), for a caption (a
    few steps are shown)."""
    p50, p90, p99 = np.percentile(times, [50, 90, 99])
    return (
        f"{what} p50 {units.seconds(float(p50))}, p90 {units.seconds(float(p90))},"
        f" p99 {units.seconds(float(p99))}, max {units.seconds(float(max(times)))}"
    )


def bound_counts(bounds: Iterable[str]) -> list[tuple[str, int]]:
    """Each bound (its value) and how many steps it bounds, the most common first."""
    return Counter(bounds).most_common()


def bounds_caption(bounds: Iterable[str]) -> str:
    """`bound: compute 9,000, communication 391`: each bound's count of steps."""
    return "bound: " + ", ".join(f"{b} {n:,}" for b, n in bound_counts(bounds))


# Of a kind of finding made once a step, a report shows this many (those that could
# gain most) and counts the rest.
FINDINGS_A_KIND = 3


def shown_findings(
    kinds: Sequence[str], gains: Sequence[float | None], most: int = FINDINGS_A_KIND
) -> tuple[list[int], dict[str, int]]:
    """Which of findings of these kinds and gains (`max_speedup`, None: unbounded) a
    report shows, in their order: of each kind, the `most` that could gain most; and
    how many of each kind it leaves out."""
    by_kind: dict[str, list[int]] = {}
    for i, kind in enumerate(kinds):
        by_kind.setdefault(kind, []).append(i)
    kept: set[int] = set()
    left: dict[str, int] = {}
    for kind, which in by_kind.items():
        kept.update(sorted(which, key=lambda i: -(gains[i] or math.inf))[:most])
        if len(which) > most:
            left[kind] = len(which) - most
    return sorted(kept), left


def findings_left_out(left: dict[str, int], where: str) -> str:
    """The line that says which findings a report left out (`shown_findings`), and
    where every one is."""
    counts = ", ".join(f"{n:,} more {kind}" for kind, n in left.items())
    return (
        f"… and {counts} findings, one a step: of each kind, those above could gain most;"
        f" every one is in {where}"
    )


def step_numbers(numbers: Sequence[int]) -> str:
    """Step numbers (sorted) for a line of text: each of a few; of more, runs of
    consecutive numbers as `first–last`, a handful of runs at most and how many steps
    in all (a long trace has a hundred thousand)."""
    if len(numbers) <= SHOWN_STEPS // 2:
        return ", ".join(map(str, numbers))
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    texts = [str(a) if a == b else f"{a}–{b}" for a, b in runs]
    if len(texts) > 6:
        texts = [*texts[:4], "…", *texts[-2:]]
    return f"{', '.join(texts)} ({len(numbers):,} steps)"
