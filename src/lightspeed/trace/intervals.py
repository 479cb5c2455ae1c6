"""Sets of time intervals as numpy arrays: union, length, clipping, overlap.

Events on one timeline (kernels on several streams, CPU calls on several threads)
overlap; the time something was busy is the length of the union of its intervals,
never the sum of their durations.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
# A set of intervals: their starts and ends.
Spans = tuple[Array, Array]


def union(starts: Array, ends: Array) -> tuple[Array, Array]:
    """The disjoint, sorted intervals covering the same time as [starts, ends)."""
    # Called thousands of times on a few intervals each: ndarray methods, not the
    # slower module functions that wrap them.
    n = len(starts)
    if n == 0:
        return np.empty(0), np.empty(0)
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    if n > 1 and not (s[1:] >= s[:-1]).all():  # events mostly come in time order already
        order = s.argsort(kind="stable")
        s, e = s[order], e[order]
    e = np.maximum.accumulate(e)
    # A new interval begins where a start lies beyond every earlier end.
    begins = np.empty(n, dtype=bool)
    begins[0] = True
    begins[1:] = s[1:] > e[:-1]
    first = begins.nonzero()[0]
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = n - 1
    return s[first], e[last]


def length(starts: Array, ends: Array) -> float:
    """Total time covered by the intervals (overlaps counted once)."""
    # An interval that lasts no time covers none and joins nothing the others do not.
    # (One that ends before it starts is kept: HTA's rounding makes some, and counts
    # them.)
    lasting = ends != starts
    if not lasting.all():
        starts, ends = starts[lasting], ends[lasting]
    u_start, u_end = union(starts, ends)
    return float((u_end - u_start).sum())


def clip(starts: Array, ends: Array, lo: float, hi: float) -> tuple[Array, Array]:
    """The parts of the intervals inside [lo, hi); empty parts are dropped."""
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    keep = e > s
    return s[keep], e[keep]


def within(spans: Spans, lo: float, hi: float) -> Spans:
    """`clip` of disjoint intervals sorted by start (as `union` gives them), in time
    proportional to how many lie in [lo, hi) rather than to all of them."""
    starts, ends = spans
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(starts, hi, side="left"))
    return clip(starts[first:last], ends[first:last], lo, hi)


def overlap(a: tuple[Array, Array], b: tuple[Array, Array], *, disjoint: bool = False) -> float:
    """Time covered by both interval sets: |A| + |B| − |A ∪ B|. `disjoint`: each set
    is already disjoint and sorted, no two of its intervals touching (as `union`, `gaps`
    and `within` give them), so its length is the sum of its intervals'."""
    both_s = np.concatenate([a[0], b[0]])
    both_e = np.concatenate([a[1], b[1]])
    if disjoint:
        alone = float((a[1] - a[0]).sum()) + float((b[1] - b[0]).sum())
    else:
        alone = length(*a) + length(*b)
    return alone - length(both_s, both_e)


def gaps(starts: Array, ends: Array, lo: float, hi: float) -> tuple[Array, Array]:
    """The intervals of [lo, hi) that no interval covers."""
    u_start, u_end = union(*clip(starts, ends, lo, hi))
    gap_s = np.concatenate([[lo], u_end])
    gap_e = np.concatenate([u_start, [hi]])
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


def join(*sets: Spans) -> Spans:
    """The intervals of all `sets` together (not merged: `union` merges)."""
    if not sets:
        return np.empty(0), np.empty(0)
    return np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets])
