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
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from math import isfinite
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
}
NO_ID = -1
# The categories exactly as Kineto writes them, for the common case (no lower-casing).
_KIND_OF = dict(CATEGORY_KINDS) | {
    "Kernel": Kind.KERNEL,
    "Memcpy": Kind.MEMCPY,
    "Memset": Kind.MEMSET,
}
_INT64 = 2**63


@dataclasses.dataclass(frozen=True, kw_only=True)
class EventTable:
    """Complete events of one kind as columns, in file order.

    `name` indexes `Trace.names`; `ts_us` and `dur_us` are the trace's microseconds;
    `pid`/`tid` are integers (a non-numeric one gets a negative id); `correlation` and
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

    @property
    def end_us(self) -> FloatArray:
        return self.ts_us + self.dur_us

    def take(self, mask: npt.NDArray[np.bool_] | IntArray) -> EventTable:
        """The rows selected by a boolean mask or an index array."""
        return EventTable(**{f.name: getattr(self, f.name)[mask] for f in _FIELDS})


_FIELDS = dataclasses.fields(EventTable)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trace:
    """One rank's trace: its event tables, names, and what the file says about itself.

    `rank` and `world_size` come from `distributedInfo` (None when absent).
    `device_names` from `deviceProperties`. `skipped` counts the events of categories
    no analysis reads, and `malformed` the events that could not be read at all.
    """

    path: str
    rank: int | None
    world_size: int | None
    device_names: tuple[str, ...]
    names: tuple[str, ...]
    tables: Mapping[Kind, EventTable]
    skipped: Mapping[str, int]
    malformed: int
    event_count: int

    def table(self, kind: Kind) -> EventTable:
        return self.tables[kind]


class TraceBuilder:
    """Collects events into compact columns: each batch is checked and flattened into
    two Python lists per kind, then converted to numpy and the lists dropped, so memory
    holds numpy columns (8 bytes a value) and one batch."""

    def __init__(self) -> None:
        self._names: dict[str, int] = {}
        self._ids: dict[str, int] = {}  # non-numeric pid/tid values → negative ids
        self._ints: dict[Kind, list[IntArray]] = {kind: [] for kind in Kind}
        self._floats: dict[Kind, list[FloatArray]] = {kind: [] for kind in Kind}
        self.skipped: Counter[str] = Counter()
        self.malformed = 0
        self.count = 0

    def add(self, event: Any) -> None:
        """Keep `event` if it is a complete event of a kind the analyses read."""
        self.add_all((event,))

    def add_all(self, events: Sequence[Any]) -> None:
        """`add` each of `events`. One loop, with the common case kept short: it runs
        once per event of traces with millions of them."""
        ints: dict[Kind, list[int]] = {kind: [] for kind in Kind}
        floats: dict[Kind, list[float]] = {kind: [] for kind in Kind}
        names = self._names
        self.count += len(events)
        for event in events:
            if type(event) is not dict:
                self.malformed += 1
                continue
            get = event.get
            cat = get("cat")
            kind = _KIND_OF.get(cat) if type(cat) is str else None
            if kind is None and type(cat) is str:  # another Kineto's capitalisation
                kind = CATEGORY_KINDS.get(cat.lower())
            if kind is None or get("ph") != "X":
                self.skipped[str(cat) if cat is not None else f"ph {get('ph')}"] += 1
                continue
            ts, dur, name, args = get("ts"), get("dur", 0), get("name"), get("args")
            if type(ts) is not float or not isfinite(ts):
                ts = _number(ts)
            if type(dur) is not float or not isfinite(dur):
                dur = _number(dur)
            if ts is None or dur is None or dur < 0 or type(name) is not str:
                self.malformed += 1
                continue
            if type(args) is not dict:
                args = _NO_ARGS
            name_id = names.get(name)
            if name_id is None:
                name_id = names[name] = len(names)
            pid, tid = get("pid"), get("tid")
            corr, ext = args.get("correlation", NO_ID), args.get("External id", NO_ID)
            if not (type(pid) is int and type(tid) is int and -_INT64 <= pid < _INT64):
                pid, tid = self._int_id(pid), self._int_id(tid)
            if not (type(corr) is int and type(ext) is int):
                corr, ext = _int_or(corr, NO_ID), _int_or(ext, NO_ID)
            ints[kind].extend((name_id, pid, tid, corr, ext))
            floats[kind].extend((ts, dur))
        for kind in Kind:
            if floats[kind]:
                self._floats[kind].append(np.array(floats[kind], dtype=np.float64))
                self._ints[kind].append(_int_array(ints[kind]))

    def _int_id(self, value: Any) -> int:
        as_int = _int_or(value, None)
        if as_int is not None:
            return int(as_int)
        key = str(value)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = -(len(self._ids) + 2)  # -1 is NO_ID
        return found

    def build(self, path: str, metadata: Mapping[str, Any]) -> Trace:
        tables = {kind: self._table(kind) for kind in Kind}
        info = metadata.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        return Trace(
            path=path,
            rank=_int_or(info.get("rank"), None),
            world_size=_int_or(info.get("world_size"), None),
            device_names=_device_names(metadata.get("deviceProperties")),
            names=tuple(self._names),
            tables=tables,
            skipped=dict(self.skipped),
            malformed=self.malformed,
            event_count=self.count,
        )

    def _table(self, kind: Kind) -> EventTable:
        ints = (
            np.concatenate(self._ints[kind]).reshape(-1, 5)
            if self._ints[kind]
            else np.zeros((0, 5), dtype=np.int64)
        )
        floats = (
            np.concatenate(self._floats[kind]).reshape(-1, 2)
            if self._floats[kind]
            else np.zeros((0, 2))
        )
        return EventTable(
            name=ints[:, 0].copy(),
            pid=ints[:, 1].copy(),
            tid=ints[:, 2].copy(),
            correlation=ints[:, 3].copy(),
            external_id=ints[:, 4].copy(),
            ts_us=floats[:, 0].copy(),
            dur_us=floats[:, 1].copy(),
        )


_NO_ARGS: dict[str, Any] = {}


def _int_array(values: list[int]) -> IntArray:
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:  # an id beyond 64 bits: such ids mean nothing here
        return np.array([v if -_INT64 <= v < _INT64 else NO_ID for v in values], dtype=np.int64)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _int_or(value: Any, default: int | None) -> Any:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return _int_or(int(value), default)
    if isinstance(value, float) and value.is_integer():
        return _int_or(int(value), default)
    return default


def _device_names(props: Any) -> tuple[str, ...]:
    if not isinstance(props, list):
        return ()
    return tuple(str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name"))
