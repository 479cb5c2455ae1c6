"""A profiler trace as compact columns: the events the analyses read, by kind.

Kineto writes complete events (`"ph": "X"`) with a category (`cat`), a name, a start
`ts` and a duration `dur` in µs, a process `pid` and thread `tid` (on the device side:
the device and the stream), and `args` (`correlation` links a runtime launch on the
CPU to the kernel it launched). Only the kinds below are kept, each as numpy columns;
everything else is counted by category in `Trace.skipped`, so a report can say what
it did not analyse.
"""

from __future__ import annotations

import array
import dataclasses
import enum
import math
from collections import Counter
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
}
NO_ID = -1


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
    """Collects events one at a time into compact columns (8 bytes a value)."""

    def __init__(self) -> None:
        self._names: dict[str, int] = {}
        self._ids: dict[str, int] = {}  # non-numeric pid/tid values → negative ids
        self._columns: dict[Kind, dict[str, array.array[Any]]] = {
            kind: {
                f.name: array.array("d" if f.name in ("ts_us", "dur_us") else "q") for f in _FIELDS
            }
            for kind in Kind
        }
        self.skipped: Counter[str] = Counter()
        self.malformed = 0
        self.count = 0

    def add(self, event: Any) -> None:
        """Keep `event` if it is a complete event of a kind the analyses read."""
        self.count += 1
        if not isinstance(event, dict):
            self.malformed += 1
            return
        cat = event.get("cat")
        kind = CATEGORY_KINDS.get(cat.lower()) if isinstance(cat, str) else None
        if kind is None or event.get("ph") != "X":
            self.skipped[str(cat) if cat is not None else f"ph {event.get('ph')}"] += 1
            return
        ts = _number(event.get("ts"))
        dur = _number(event.get("dur", 0))
        name = event.get("name")
        if ts is None or dur is None or dur < 0 or not isinstance(name, str):
            self.malformed += 1
            return
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        cols = self._columns[kind]
        cols["name"].append(self._name_id(name))
        cols["ts_us"].append(ts)
        cols["dur_us"].append(dur)
        cols["pid"].append(self._int_id(event.get("pid")))
        cols["tid"].append(self._int_id(event.get("tid")))
        cols["correlation"].append(_int_or(args.get("correlation"), NO_ID))
        cols["external_id"].append(_int_or(args.get("External id"), NO_ID))

    def _name_id(self, name: str) -> int:
        found = self._names.get(name)
        if found is None:
            found = self._names[name] = len(self._names)
        return found

    def _int_id(self, value: Any) -> int:
        as_int = _int_or(value, None)
        if as_int is not None:
            return as_int
        key = str(value)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = -(len(self._ids) + 2)  # -1 is NO_ID
        return found

    def build(self, path: str, metadata: Mapping[str, Any]) -> Trace:
        tables = {kind: _table(cols) for kind, cols in self._columns.items()}
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


def _table(cols: Mapping[str, array.array[Any]]) -> EventTable:
    def ints(name: str) -> IntArray:
        return np.frombuffer(cols[name], dtype=np.int64)

    def floats(name: str) -> FloatArray:
        return np.frombuffer(cols[name], dtype=np.float64)

    return EventTable(
        name=ints("name"),
        ts_us=floats("ts_us"),
        dur_us=floats("dur_us"),
        pid=ints("pid"),
        tid=ints("tid"),
        correlation=ints("correlation"),
        external_id=ints("external_id"),
    )


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
