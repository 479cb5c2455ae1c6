"""A profiler trace as compact columns: the events the analyses read, by kind.

Kineto writes complete events (`"ph": "X"`) with a category (`cat`), a name, a start
`ts` and a duration `dur` in µs, a process `pid` and thread `tid` (on the device side:
the device and the stream), and `args` (`correlation` links a runtime launch on the
CPU to the kernel it launched). Only the kinds below are kept, each as numpy columns;
everything else is counted by category in `Trace.skipped`, so a report can say what
it did not analyse.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class Kind(str, enum.Enum):
    """The kinds of events the analyses read."""

    KERNEL = "kernel"  # a GPU kernel
    MEMCPY = "memcpy"  # a device memory copy
    MEMSET = "memset"  # a device memory set
    RUNTIME = "runtime"  # a CUDA/HIP runtime or driver call on the CPU (launches, syncs)
    CPU_OP = "cpu_op"  # an operator on the CPU (aten::mm, autograd::engine::…)
    ANNOTATION = "annotation"  # a user annotation on the CPU (ProfilerStep#N, DataLoader, …)
    GPU_ANNOTATION = "gpu_annotation"  # a user annotation as drawn on the GPU timeline
    SYNC = "sync"  # a CUDA synchronization as seen by the device (`cuda_sync`)


# Kineto's categories (lower-cased) for each kind, across Kineto versions and ROCm.
CATEGORY_KINDS: Mapping[str, Kind] = {
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "cuda_sync": Kind.SYNC,
    # Meta's MTIA accelerator: its command processor's events run on the device.
    "mtia_ccp_events": Kind.KERNEL,
    "mtia_runtime": Kind.RUNTIME,
}
NO_ID = -1
US = 1e-6  # seconds per µs, the unit of every time in a trace


def seconds(us: npt.ArrayLike) -> list[float]:
    """Microseconds as seconds, one Python float each (what `float(x) * US` makes of
    each): a long trace's steps' figures made at once."""
    found: list[float] = (np.asarray(us, dtype=np.float64) * US).tolist()
    return found


# CPU ops whose input shapes the reader keeps: matrix products, whose FLOPs and bytes
# follow from them.
# CPU ops whose recorded shapes are kept: the matrix products, and each gradient's
# accumulation (its size, for data-parallel buckets).
SHAPED_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "torch::autograd::AccumulateGrad"}
)


@dataclasses.dataclass(frozen=True)
class TimeOrder:
    """Events sorted by start: `rows` (their rows in the table), `start_us`, and
    `reach_us`, the latest end among each event and those that start before it."""

    rows: IntArray
    start_us: FloatArray
    end_us: FloatArray
    reach_us: FloatArray

    @classmethod
    def of(cls, start_us: FloatArray, end_us: FloatArray) -> TimeOrder:
        rows = np.argsort(start_us, kind="stable")
        end = end_us[rows]
        reach = np.maximum.accumulate(end) if len(end) else end
        return cls(rows=rows, start_us=start_us[rows], end_us=end, reach_us=reach)

    def starting_in(self, lo: float, hi: float, *, until_hi: bool = False) -> IntArray:
        """Rows, ascending, of the events starting in [lo, hi), or [lo, hi]."""
        first = np.searchsorted(self.start_us, lo, side="left")
        last = np.searchsorted(self.start_us, hi, side="right" if until_hi else "left")
        return np.sort(self.rows[first:last])

    def overlapping(self, lo: float, hi: float) -> IntArray:
        """Rows, ascending, of the events that start before `hi` and end after `lo`."""
        last = np.searchsorted(self.start_us, hi, side="left")
        # Every event before `first` ends by `lo`: none that starts earlier reaches past it.
        first = np.searchsorted(self.reach_us[:last], lo, side="right")
        some = slice(first, last)
        return np.sort(self.rows[some][self.end_us[some] > lo])


@dataclasses.dataclass(frozen=True, kw_only=True)
class EventTable:
    """Complete events of one kind as columns, in file order.

    `name` indexes `Trace.names`; `ts_us` and `dur_us` are the trace's microseconds;
    `pid`/`tid` are integers (a non-numeric one gets a negative id; a device event's
    or sync record's `tid` is the stream it names in `args`, where it names one, as
    HTA reads it); `correlation` and
    `external_id` are NO_ID where absent.
    """

    name: IntArray
    ts_us: FloatArray
    dur_us: FloatArray
    pid: IntArray
    tid: IntArray
    correlation: IntArray
    external_id: IntArray

    def __len__(self) -> int:
        return len(self.name)

    @functools.cached_property
    def end_us(self) -> FloatArray:
        return self.ts_us + self.dur_us

    @functools.cached_property
    def by_start(self) -> TimeOrder:
        """The events in order of their start, to find those of a window in time
        proportional to how many it holds (the table's rows are in file order)."""
        return TimeOrder.of(self.ts_us, self.end_us)

    @functools.cached_property
    def by_correlation(self) -> tuple[IntArray, IntArray]:
        """The rows of the events that have a correlation id, ordered by it (stable), and
        those ids."""
        rows = np.flatnonzero(self.correlation != NO_ID)
        order = rows[np.argsort(self.correlation[rows], kind="stable")]
        return order, self.correlation[order]

    def starting_in(self, lo: float, hi: float, *, until_hi: bool = False) -> IntArray:
        """The rows, ascending, of the events that start in [lo, hi) (with `until_hi`,
        in [lo, hi])."""
        return self.by_start.starting_in(lo, hi, until_hi=until_hi)

    def overlapping(self, lo: float, hi: float) -> IntArray:
        """The rows, ascending, of the events with time in (lo, hi): they start before
        `hi` and end after `lo`."""
        return self.by_start.overlapping(lo, hi)

    def rows(self, which: IntArray) -> EventTable:
        """The events at positions `which`, in that order."""
        return EventTable(
            **{f.name: getattr(self, f.name)[which] for f in dataclasses.fields(self)}
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceDevice:
    """A GPU as a trace's `deviceProperties` describe it: its `name`, its SMs (an AMD
    GPU's CUs; `numSms`) and its memory in bytes (`totalGlobalMem`), None where absent."""

    name: str
    sm_count: int | None = None
    memory_bytes: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trace:
    """One rank's trace: its event tables, names, and what the file says about itself.

    `rank` and `world_size` come from `distributedInfo` (None when absent).
    `devices` from `deviceProperties`. `skipped` counts the events of categories
    no analysis reads, `malformed` the events that could not be read at all, and
    `not_utf8` the byte sequences of the file that were not UTF-8 (read as U+FFFD).
    `op_shapes` holds, for the CPU ops named in SHAPED_OPS (by row of the CPU-op
    table), their `Input Dims` and `Input type` as the trace wrote them (present when
    it was recorded with `record_shapes=True`), unchecked.
    """

    path: str
    rank: int | None
    world_size: int | None
    devices: tuple[TraceDevice, ...]
    names: tuple[str, ...]
    tables: Mapping[Kind, EventTable]
    skipped: Mapping[str, int]
    malformed: int
    event_count: int
    op_shapes: Mapping[int, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    not_utf8: int = 0

    def table(self, kind: Kind) -> EventTable:
        return self.tables[kind]

    @property
    def device_names(self) -> tuple[str, ...]:
        """The names of `devices`, in the trace's order."""
        return tuple(d.name for d in self.devices)
