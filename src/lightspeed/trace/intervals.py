"""Sets of time intervals as numpy arrays: union, length, clipping, overlap.

Events on one timeline (kernels on several streams, CPU calls on several threads)
overlap; the time something was busy is the length of the union of its intervals,
never the sum of their durations.
"""

from __future__ import annotations

import dataclasses

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


# Many windows at once. A long trace has thousands of steps of a few events each, and a
# numpy call costs microseconds whatever its size: the steps' figures are computed over
# all their events together.

IntArray = npt.NDArray[np.int64]
# Parts of intervals, each inside one window: the window's index, and the part's start
# and end.
Parts = tuple[IntArray, Array, Array]
# Steps overlap their neighbours only by a float's rounding (a step's end is its start
# plus its duration): windows k and k + stride must not overlap, for a stride this small.
MAX_STRIDE = 4


@dataclasses.dataclass(frozen=True)
class Windows:
    """Windows [lo, hi) sorted by start, where every `stride`-th window (k, k + stride,
    …) ends before the next of them begins, and what the window-by-window functions
    above give for each of them, computed for all of them at once."""

    lo: Array
    hi: Array
    stride: int

    @classmethod
    def of(cls, lo: Array, hi: Array) -> Windows | None:
        """The windows, or None where they are not sorted, not finite or overlap more
        than `MAX_STRIDE` allows."""
        if len(lo) == 0 or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            return None
        if not ((hi >= lo).all() and (lo[1:] >= lo[:-1]).all()):
            return None
        for stride in range(1, MAX_STRIDE + 1):
            if (lo[stride:] >= hi[:-stride]).all():
                return cls(lo, hi, stride)
        return None

    def __len__(self) -> int:
        return len(self.lo)

    @property
    def extent(self) -> tuple[float, float]:
        """From the first window's start to the last end: what any window holds lies in
        it (so a trace's events are cut to it before they are spread over many steps)."""
        return float(self.lo[0]), float(self.hi.max())

    def _groups(self) -> list[IntArray]:
        n = len(self.lo)
        return [np.arange(g, n, self.stride) for g in range(min(self.stride, n))]

    def starting(self, times: Array) -> tuple[IntArray, IntArray]:
        """Which of `times` lie in which window: pairs (position in `times`, window),
        a time in two windows counted in both."""
        which, window = [], []
        for group in self._groups():
            lo, hi = self.lo[group], self.hi[group]
            k = np.searchsorted(lo, times, side="right") - 1
            inside = (k >= 0) & (times < hi[np.clip(k, 0, None)])
            which.append(np.flatnonzero(inside))
            window.append(group[k[inside]])
        return np.concatenate(which).astype(np.int64), np.concatenate(window).astype(np.int64)

    def spread(self, starts: Array, ends: Array) -> Parts:
        """The parts of the intervals inside each window, as `clip` gives them window by
        window (parts of no length dropped), by window, then start."""
        sets = []
        for group in self._groups():
            lo, hi = self.lo[group], self.hi[group]
            first = np.searchsorted(hi, starts, side="right")  # the first ending after it
            stop = np.searchsorted(lo, ends, side="left")  # the first starting at its end
            counts = np.maximum(stop - first, 0)
            total = int(counts.sum())
            which = np.repeat(np.arange(len(starts)), counts)
            runs = np.repeat(np.cumsum(counts) - counts, counts)
            k = np.repeat(first, counts) + (np.arange(total) - runs)
            s = np.maximum(starts[which], lo[k])
            e = np.minimum(ends[which], hi[k])
            keep = e > s
            sets.append((group[k[keep]], s[keep], e[keep]))
        window, s, e = join_parts(*sets)
        order = np.lexsort((s, window))
        return window[order], s[order], e[order]

    def union(self, parts: Parts) -> Parts:
        """Each window's parts merged as `union` merges one window's intervals; by
        window, then start."""
        window = parts[0]
        if self.stride == 1:
            return _union_apart(parts)
        merged = [
            _union_apart((window[m], parts[1][m], parts[2][m]))
            for g in range(self.stride)
            for m in [window % self.stride == g]
        ]
        joined = join_parts(*merged)
        order = np.lexsort((joined[1], joined[0]))
        return joined[0][order], joined[1][order], joined[2][order]

    def lengths(self, parts: Parts) -> Array:
        """The summed length of each window's parts (disjoint parts: a union's)."""
        window, s, e = parts
        n = len(self.lo)
        return np.asarray(np.bincount(window, weights=e - s, minlength=n)[:n], dtype=np.float64)

    def overlap(self, a: Parts, b: Parts) -> Array:
        """`overlap` of each window's parts of `a` and of `b`, each set disjoint within
        a window (a union's): |A| + |B| − |A ∪ B|."""
        both = self.lengths(self.union(join_parts(a, b)))
        return self.lengths(a) + self.lengths(b) - both

    def counts(self, window: IntArray) -> IntArray:
        """How many of `window` (a window index each) name each window."""
        n = len(self.lo)
        return np.bincount(window, minlength=n)[:n].astype(np.int64)


def outside(spans: Spans) -> Spans:
    """The time no interval of `spans` (disjoint, sorted, as `union` gives them) covers,
    from −∞ to +∞; an interval lasting no time covers none (as `clip` drops it)."""
    lasting = spans[1] > spans[0]
    starts, ends = spans[0][lasting], spans[1][lasting]
    return np.concatenate([[-np.inf], ends]), np.concatenate([starts, [np.inf]])


def join_parts(*sets: Parts) -> Parts:
    """The parts of all `sets` together."""
    if not sets:
        return np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)
    return (
        np.concatenate([p[0] for p in sets]).astype(np.int64),
        np.concatenate([p[1] for p in sets]),
        np.concatenate([p[2] for p in sets]),
    )


def _union_apart(parts: Parts) -> Parts:
    """`Windows.union` of parts of windows that do not overlap."""
    window, s, e = parts
    if len(s) == 0:
        return parts
    order = np.lexsort((s, window))
    window, s, e = window[order], s[order], e[order]
    # One running maximum serves every window: each part lies inside its window, and
    # each window ends before the next begins, so no window's ends reach into the next.
    e = np.maximum.accumulate(e)
    begins = np.empty(len(s), dtype=bool)
    begins[0] = True
    begins[1:] = (s[1:] > e[:-1]) | (window[1:] != window[:-1])
    first = begins.nonzero()[0]
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = len(s) - 1
    return window[first], s[first], e[last]
