"""Events on the lanes of a drawing, made few enough to draw: cut to a window,
flattened, short runs merged, capped.

A lane is one row: events on it that overlap (a sync that outlives the op it ran in,
the clocks of two records) are cut so that each begins where every earlier one ended;
an event wholly covered is dropped. Then a run of consecutive events of one lane and one
category, each shorter than `short_us` and with no gap that long between two of them,
becomes one block from the first's start to the last's end (a lone short event stays
itself; a run of a `kept_category`, such as collectives, stays of its category). Then,
if more than `max_events` remain, the longest are kept (equal lengths: the earlier lane
and start). Every step is a numpy operation over all events, so its cost stays small
next to reading the trace; the same events always give the same blocks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lightspeed.trace.events import EventTable, FloatArray, IntArray
from lightspeed.trace.names import BoolArray


@dataclasses.dataclass(frozen=True)
class Blocks:
    """Events as columns: lane index (-1 until lanes are known), start and end in µs,
    name id (-1: a merged block), category code, and how many events each holds."""

    lane: IntArray
    start_us: FloatArray
    end_us: FloatArray
    name: IntArray
    category: IntArray
    count: IntArray

    def __len__(self) -> int:
        return len(self.lane)

    def take(self, which: IntArray | BoolArray) -> Blocks:
        """The blocks `which` picks (indices or a mask), every column alike."""
        return Blocks(*(getattr(self, f.name)[which] for f in _FIELDS))

    @staticmethod
    def of(table: EventTable, category: IntArray | int) -> Blocks:
        """The events of `table`, one block each, on no lane yet."""
        n = len(table)
        return Blocks(
            np.full(n, -1, dtype=np.int64),
            table.ts_us,
            table.end_us,
            table.name,
            np.broadcast_to(np.asarray(category, dtype=np.int64), (n,)),
            np.ones(n, dtype=np.int64),
        )

    @staticmethod
    def join(parts: Sequence[Blocks]) -> Blocks:
        """`parts` one after the other."""
        return Blocks(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in _FIELDS))


_FIELDS = dataclasses.fields(Blocks)


def group(keys: IntArray) -> tuple[IntArray, IntArray]:
    """The distinct rows of the (n, k) `keys`, in lexicographic order, and the index of
    each row among them. (Column by column, in integer sorts: `np.unique(axis=0)`
    compares rows as bytes, several times slower on a large trace.)"""
    code = np.zeros(len(keys), dtype=np.int64)
    for column in keys.T:
        values, index = np.unique(column, return_inverse=True)
        _, code = np.unique(code * len(values) + index.reshape(-1), return_inverse=True)
        code = code.reshape(-1)
    _, first = np.unique(code, return_index=True)
    return keys[first], code


def downsample(
    blocks: Blocks,
    lo_us: float,
    hi_us: float,
    *,
    short_us: float,
    max_events: int,
    merged_category: int,
    kept_category: int | None = None,
) -> Blocks:
    """`blocks` (on lanes) cut to [lo_us, hi_us], flattened, merged and capped (see the
    module's docstring), sorted by lane, then start; merged blocks get
    `merged_category`."""
    order = np.lexsort((blocks.start_us - blocks.end_us, blocks.start_us, blocks.lane))
    blocks = blocks.take(order)  # by lane, then start, the longer first: it holds the other
    lane = blocks.lane
    start, end = np.clip(blocks.start_us, lo_us, hi_us), np.clip(blocks.end_us, lo_us, hi_us)
    reach = np.full(len(lane), -np.inf)  # the latest end of the lane's earlier events
    bounds = np.flatnonzero(np.diff(lane)) + 1
    for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(lane)], strict=True):
        reach[a + 1 : b] = np.maximum.accumulate(end[a : b - 1])
    flat = np.maximum(start, reach)
    # An event lasting no time stays where it lies inside the window and no other is.
    instant = (blocks.start_us == blocks.end_us) & (start == blocks.start_us) & (start >= reach)
    kept = (end > flat) | instant
    blocks = dataclasses.replace(blocks.take(kept), start_us=flat[kept], end_us=end[kept])
    blocks = _merge_short(blocks, short_us, merged_category, kept_category)
    if len(blocks) > max_events:
        length = blocks.end_us - blocks.start_us
        longest = np.lexsort((np.arange(len(length)), -length))[:max_events]
        blocks = blocks.take(np.sort(longest))
    return blocks


def _merge_short(
    blocks: Blocks, short_us: float, merged_category: int, kept_category: int | None
) -> Blocks:
    """Runs of short events of one lane and category, with no long gap between them, as
    one block. The lane's blocks are disjoint and in time order, so a run ends where its
    last does."""
    lane, start, end, category = blocks.lane, blocks.start_us, blocks.end_us, blocks.category
    short = (end - start) < short_us
    joins = np.zeros(len(lane), dtype=bool)  # event i joins the block of event i − 1
    joins[1:] = (
        short[1:]
        & short[:-1]
        & (lane[1:] == lane[:-1])
        & (category[1:] == category[:-1])
        & ((start[1:] - end[:-1]) < short_us)
    )
    firsts = np.flatnonzero(~joins)
    count = np.diff(np.r_[firsts, len(lane)])
    merged = count > 1
    return dataclasses.replace(
        blocks.take(firsts),
        end_us=end[firsts + count - 1],
        name=np.where(merged, -1, blocks.name[firsts]),
        category=np.where(
            merged & (category[firsts] != kept_category), merged_category, category[firsts]
        ),
        count=count,
    )
