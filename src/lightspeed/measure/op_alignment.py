"""Match the ops a dispatch mode captured to the events a profiler recorded of the same step.

A pure function over plain data, so it is tested without running a profiler.

The two views of a step differ in depth. A TorchDispatchMode sees each op once, below
autograd and composite decomposition: `["aten::t", "aten::addmm"]`. The profiler records
every dispatcher call, nested: `aten::linear` contains `aten::t` (which contains
`aten::transpose`) and `aten::addmm`; backward ops sit under `autograd::engine::…` events,
possibly on another thread. The children of an op the dispatch mode saw are that op's
internals, which it never saw as separate ops.

The algorithm, `align_ops(names, events)`:

1. Candidates. Order the events by start time across all threads (ties: the longer, then
   the shallower first, so a parent precedes its children) and keep those whose name
   is a captured name and none of whose ancestors has a captured name. Whether a
   dispatch mode sees an op depends on the op, not on where it is called (composite ops
   such as `aten::linear` never reach it), so an event under an event with a captured
   name is that op's internals, matched or not; this keeps an internal `aten::copy_`
   from standing in for a later captured one.
2. Greedy matching with a bounded look-ahead. With cursors i (captured names) and j
   (candidates), consider every pair (a, b) with a + b <= `window` where
   `names[i + a]` is the name of candidate `j + b`: "the next a captured ops have no
   event, and the next b candidates are events the dispatch mode did not see". Its
   cost is a + b, plus one for each of the `CONFIRM` pairs after it that disagree
   (running out of captured names counts as agreeing). The cheapest pair wins; ties go
   to the smaller a + b, then the smaller a. The a names stay unmatched (None), the
   pair is matched, and both cursors move past it. So one op missing on either side
   costs one step, not a desynchronised tail.
3. Resynchronisation. When no pair lies within the window, the next `RESYNC_TRIES`
   candidates named `names[i]` further on are tried, and the first one followed by
   `CONFIRM` agreeing pairs is matched; failing that, `names[i]` stays unmatched and
   the candidate cursor stays where it is.

Names compare by `op_key`, which equates an op's in-place and out-of-place variants
(`aten::add_` and `aten::add`): autograd accumulates gradients out of place while a
Python dispatch mode is active and in place otherwise, so the two runs of one step
name that same accumulation differently.

The result is, for each captured name, the index of its event in `events` or None; the
matched events appear in start order and never nest.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

# How many pairs after a match are compared to confirm it.
CONFIRM = 3
# How many far candidates of the wanted name the resynchronisation tries.
RESYNC_TRIES = 8
# The default look-ahead: how far (captured ops skipped + events skipped) a match may lie.
DEFAULT_WINDOW = 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpEvent:
    """One op call as a profiler recorded it.

    `start_ns`/`end_ns` are nanoseconds on the profiler's clock; `parent` is the index
    (in the same event list) of the event that encloses it on its thread, None at the
    top level; `thread` is the id of the thread that ran it.
    """

    name: str
    start_ns: int
    end_ns: int
    parent: int | None
    thread: int


def op_key(name: str) -> str:
    """The name an op is matched by: its in-place trailing underscore dropped.

    `aten::add_` -> `aten::add`; dunder ops (`aten::__and__`) are left alone.
    """
    if name.endswith("_") and not name.endswith("__"):
        return name[:-1]
    return name


def align_ops(
    names: Sequence[str], events: Sequence[OpEvent], *, window: int = DEFAULT_WINDOW
) -> list[int | None]:
    """For each captured op name, the index in `events` of its matched event, or None.

    See the module docstring for the algorithm; `window` bounds the look-ahead.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    keys = [op_key(n) for n in names]
    candidates = candidate_events(events, frozenset(keys))
    matches = _Matcher(keys, [op_key(events[k].name) for k in candidates], window).run()
    return [None if c is None else candidates[c] for c in matches]


def candidate_events(events: Sequence[OpEvent], wanted: frozenset[str]) -> list[int]:
    """Indices of the events a captured op can match, in start order (step 1 above).

    `wanted` holds the captured names, already passed through `op_key`.
    """
    depth = [_depth(events, k) for k in range(len(events))]
    order = sorted(
        range(len(events)), key=lambda k: (events[k].start_ns, -events[k].end_ns, depth[k], k)
    )
    return [k for k in order if op_key(events[k].name) in wanted and not _under(events, k, wanted)]


class _Matcher:
    """Greedy alignment of two flat name sequences (steps 2 and 3 above)."""

    def __init__(self, names: list[str], found: list[str], window: int) -> None:
        self.names = names  # captured, in dispatch order
        self.found = found  # candidate events', in start order
        self.window = window
        self.positions: dict[str, list[int]] = {}
        for j, name in enumerate(found):
            self.positions.setdefault(name, []).append(j)

    def run(self) -> list[int | None]:
        """For each captured name, the index of its candidate, or None."""
        result: list[int | None] = [None] * len(self.names)
        i = j = 0
        while i < len(self.names):
            choice = self._nearest(i, j) or self._resync(i, j)
            if choice is None:
                i += 1  # names[i] has no event: leave it None, keep the cursor
                continue
            skipped, match = choice
            result[i + skipped] = match
            i, j = i + skipped + 1, match + 1
        return result

    def _agreeing(self, i: int, j: int) -> int:
        """How many of the CONFIRM pairs after (names[i], found[j]) agree, in a row."""
        for t in range(1, CONFIRM + 1):
            if i + t >= len(self.names):
                return CONFIRM  # no captured op left to contradict the match
            if j + t >= len(self.found) or self.found[j + t] != self.names[i + t]:
                return t - 1
        return CONFIRM

    def _nearest(self, i: int, j: int) -> tuple[int, int] | None:
        """The cheapest (captured ops skipped, candidate) within the window, or None."""
        best: tuple[int, int, int, int] | None = None  # (cost, distance, skipped, candidate)
        for b in range(min(self.window, len(self.found) - 1 - j) + 1):
            for a in range(min(self.window - b, len(self.names) - 1 - i) + 1):
                if self.names[i + a] != self.found[j + b]:
                    continue
                cost = a + b + CONFIRM - self._agreeing(i + a, j + b)
                if cost == 0:
                    return 0, j  # an exact, confirmed match at both cursors
                key = (cost, a + b, a, j + b)
                if best is None or key < best:
                    best = key
        return None if best is None else (best[2], best[3])

    def _resync(self, i: int, j: int) -> tuple[int, int] | None:
        """A far candidate named names[i] followed by CONFIRM agreeing pairs, or None."""
        positions = self.positions.get(self.names[i], [])
        start = bisect.bisect_left(positions, j)
        for far in positions[start : start + RESYNC_TRIES]:
            if self._agreeing(i, far) == CONFIRM:
                return 0, far
        return None


def _depth(events: Sequence[OpEvent], k: int) -> int:
    depth, parent = 0, events[k].parent
    while parent is not None:
        depth += 1
        parent = events[parent].parent
    return depth


def _under(events: Sequence[OpEvent], k: int, wanted: frozenset[str]) -> bool:
    """Whether an ancestor of event k has a captured name."""
    parent = events[k].parent
    while parent is not None:
        if op_key(events[parent].name) in wanted:
            return True
        parent = events[parent].parent
    return False
