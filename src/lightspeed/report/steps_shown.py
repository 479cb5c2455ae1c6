"""Which steps of a long trace a report lists, and what summarises the rest: the
terminal lists the first and last few steps and the slowest, with percentiles of step
time and each bound's count; JSON and HTML keep every step."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from lightspeed import units

# A trace with more steps than this lists a few of them in the terminal (the first and
# last, the slowest) and summarises the rest.
SHOWN_STEPS = 24
_ENDS, _SLOWEST = 5, 5
SHOWN_OF = f"{{steps:,}} steps, shown: the first and last {_ENDS} and the {_SLOWEST} slowest"


def shown_indices(
    times: Sequence[float], most: int = SHOWN_STEPS, ends: int = _ENDS, slowest: int = _SLOWEST
) -> list[int | None]:
    """Which of steps with these times a report lists, in step order: all of them up
    to `most`, else the first and last `ends` and the `slowest`, a None where steps
    are left out."""
    n = len(times)
    if n <= most:
        return list(range(n))
    by_time = sorted(range(n), key=lambda i: times[i], reverse=True)
    keep = sorted({*range(ends), *range(n - ends, n), *by_time[:slowest]})
    shown: list[int | None] = []
    for before, i in zip([-1, *keep], keep, strict=False):
        if i > before + 1:
            shown.append(None)
        shown.append(i)
    return shown


def percentiles_caption(times: Sequence[float]) -> str:
    """The step times' p50, p90, p99 and max, for a caption (a few steps are shown)."""
    p50, p90, p99 = np.percentile(times, [50, 90, 99])
    return (
        f"step time p50 {units.seconds(float(p50))}, p90 {units.seconds(float(p90))},"
        f" p99 {units.seconds(float(p99))}, max {units.seconds(float(max(times)))}"
    )


def bound_counts(bounds: Iterable[str]) -> list[tuple[str, int]]:
    """Each bound (its value) and how many steps it bounds, the most common first."""
    counts: dict[str, int] = {}
    for b in bounds:
        counts[b] = counts.get(b, 0) + 1
    return sorted(counts.items(), key=lambda x: -x[1])


def bounds_caption(bounds: Iterable[str]) -> str:
    """`bound: compute 9,000, communication 391`: each bound's count of steps."""
    return "bound: " + ", ".join(f"{b} {n:,}" for b, n in bound_counts(bounds))
