"""Turn decoded trace events into `Trace` columns, a batch at a time.

`build_part` checks and flattens one batch (the hot loop: it runs once per event) into
a `Part` with batch-local name ids; `merge_parts` merges parts in file order into one
name table and numpy columns. Parts built in another process merge the same way,
which is how `load` reads large traces on two cores.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from math import isfinite
from typing import Any

import msgspec
import numpy as np
import orjson

from lightspeed.trace.events import (
    CATEGORY_KINDS,
    NO_ID,
    SHAPED_OPS,
    EventTable,
    FloatArray,
    IntArray,
    Kind,
    Trace,
    TraceDevice,
)

# The categories exactly as Kineto writes them, for the common case (no lower-casing).
_KIND_OF = dict(CATEGORY_KINDS) | {
    "Kernel": Kind.KERNEL,
    "Memcpy": Kind.MEMCPY,
    "Memset": Kind.MEMSET,
}
_INT64 = 2**63
# Non-integer pids and tids get ids at and below this: far below any real process or
# thread id (Kineto writes some as negative numbers).
LABEL_BASE = -(2**62)
_NO_ARGS: dict[str, Any] = {}
# An integer time beyond this is no time (and would not convert to a float).
_HUGE = 10**300
# Columns of the integer block of a part, in order.
_INT_COLUMNS = ("name", "pid", "tid", "correlation", "external_id")


@dataclasses.dataclass(frozen=True)
class Part:
    """One batch of events as columns. Name ids index `names`; a pid or tid that is not
    an integer ("Spans", "GPU 0") is stored as LABEL_BASE − k for the k-th of `labels`."""

    ints: dict[Kind, IntArray]  # (n, 5): name, pid, tid, correlation, external id
    floats: dict[Kind, FloatArray]  # (n, 2): ts, dur in µs
    # CPU-op row in the part and its shapes' key in `shapes`; each distinct (Input Dims,
    # Input type) is kept once: a trace repeats a few shapes tens of thousands of times.
    op_shapes: list[tuple[int, str]]
    shapes: dict[str, tuple[Any, Any]]
    names: list[str]
    labels: list[str]
    skipped: Counter[str]
    malformed: int
    count: int


@dataclasses.dataclass
class _Columns:
    """What `build_part` and `_build_typed_part` gather, event by event, into a Part."""

    ints: dict[Kind, list[int]] = dataclasses.field(
        default_factory=lambda: {kind: [] for kind in Kind}
    )
    floats: dict[Kind, list[float]] = dataclasses.field(
        default_factory=lambda: {kind: [] for kind in Kind}
    )
    names: dict[str, int] = dataclasses.field(default_factory=dict)
    labels: dict[str, int] = dataclasses.field(default_factory=dict)
    skipped: Counter[str] = dataclasses.field(default_factory=Counter)
    op_shapes: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    shapes: dict[str, tuple[Any, Any]] = dataclasses.field(default_factory=dict)

    def part(self, malformed: int, count: int) -> Part:
        return Part(
            ints={k: _int_array(v).reshape(-1, 5) for k, v in self.ints.items() if v},
            floats={
                k: np.array(v, dtype=np.float64).reshape(-1, 2) for k, v in self.floats.items() if v
            },
            op_shapes=self.op_shapes,
            shapes=self.shapes,
            names=list(self.names),
            labels=list(self.labels),
            skipped=self.skipped,
            malformed=malformed,
            count=count,
        )


class Args(msgspec.Struct):
    """The `args` of an event that the analyses read (`Event`)."""

    correlation: int | None = NO_ID
    external_id: int | None = msgspec.field(name="External id", default=NO_ID)
    stream: int | None = None
    input_dims: Any = msgspec.field(name="Input Dims", default=msgspec.UNSET)
    input_type: Any = msgspec.field(name="Input type", default=None)


class Event(msgspec.Struct):
    """An event as msgspec decodes it: only the fields the analyses read, each of the
    type Kineto writes (a run of events where any field has another type is decoded
    into dicts instead: `decode_events`)."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = 0
    pid: int | str | None = None
    tid: int | str | None = None
    args: Args | None = None


_EVENTS = msgspec.json.Decoder(list[Event])


def decode_events(text: str) -> list[Any]:
    """The elements of the JSON array `text`: `Event`s where msgspec reads every one of
    them as one (it skips the fields no analysis reads, and makes no dict), else
    orjson's dicts, which `build_part` checks one by one. Raises orjson.JSONDecodeError
    on text that is not JSON."""
    try:
        events: list[Any] = _EVENTS.decode(text)
    except msgspec.MsgspecError:
        events = orjson.loads(text)
    return events


def build_part(events: Sequence[Any]) -> Part:
    """Check and flatten `events`: complete events of the kinds the analyses read are
    kept, other events counted by category, unreadable ones counted as malformed."""
    if events and type(events[0]) is Event:
        return _build_typed_part(events)
    # The per-event checks stay inline in both loops: they run once per event.
    columns = _Columns()
    ints, floats, names, labels = columns.ints, columns.floats, columns.names, columns.labels
    skipped, op_shapes, shapes = columns.skipped, columns.op_shapes, columns.shapes
    malformed = 0
    cpu_op, sync, kernel = Kind.CPU_OP, Kind.SYNC, Kind.KERNEL  # locals: once per event
    for event in events:
        if type(event) is not dict:
            malformed += 1
            continue
        get = event.get
        cat = get("cat")
        kind = _KIND_OF.get(cat) if type(cat) is str else None
        if kind is None and type(cat) is str:  # another Kineto's capitalisation
            kind = CATEGORY_KINDS.get(cat.lower())
        if kind is None or get("ph") != "X":
            skipped[str(cat) if cat is not None else f"ph {get('ph')}"] += 1
            continue
        ts, dur, name, args = get("ts"), get("dur", 0), get("name"), get("args")
        # Kineto writes µs as integers or floats; anything else goes the slow way.
        if not ((type(ts) is int and -_HUGE < ts < _HUGE) or (type(ts) is float and isfinite(ts))):
            ts = _number(ts)
        if not (
            (type(dur) is int and -_HUGE < dur < _HUGE) or (type(dur) is float and isfinite(dur))
        ):
            dur = _number(dur)
        if ts is None or dur is None or dur < 0 or type(name) is not str:
            malformed += 1
            continue
        if type(args) is not dict:
            args = _NO_ARGS
        name_id = names.get(name)
        if name_id is None:
            name_id = names[name] = len(names)
        pid, tid = get("pid"), get("tid")
        corr, ext = args.get("correlation", NO_ID), args.get("External id", NO_ID)
        if not (
            type(pid) is int
            and type(tid) is int
            and LABEL_BASE < pid < _INT64
            and LABEL_BASE < tid < _INT64
        ):
            pid, tid = _label_id(pid, labels), _label_id(tid, labels)
        if not (type(corr) is int and type(ext) is int):
            corr, ext = _int_or(corr, NO_ID), _int_or(ext, NO_ID)
        if kind is kernel or kind is sync:
            # The stream, as HTA reads it: an accelerator's event thread is not its
            # stream (MTIA), and Context Sync's 2**32 − 1 (an unsigned −1) is one, which
            # HTA counts as a device event.
            stream = args.get("stream")
            if type(stream) is int and 0 <= stream < _INT64:
                tid = stream
        if kind is cpu_op and name in SHAPED_OPS and "Input Dims" in args:
            dims, types = args["Input Dims"], args.get("Input type")
            key = repr((dims, types))
            shapes.setdefault(key, (dims, types))
            op_shapes.append((len(floats[kind]) // 2, key))
        ints[kind].extend((name_id, pid, tid, corr, ext))
        floats[kind].extend((ts, dur))
    return columns.part(malformed, len(events))


def _build_typed_part(events: Sequence[Event]) -> Part:
    """`build_part` of `Event`s: the same checks, less those their types already made."""
    # The per-event checks stay inline in both loops: they run once per event.
    columns = _Columns()
    ints, floats, names, labels = columns.ints, columns.floats, columns.names, columns.labels
    skipped, op_shapes, shapes = columns.skipped, columns.op_shapes, columns.shapes
    malformed = 0
    cpu_op, sync, kernel = Kind.CPU_OP, Kind.SYNC, Kind.KERNEL
    no_args = Args()
    for event in events:
        cat = event.cat
        kind = _KIND_OF.get(cat) if cat is not None else None
        if kind is None and cat is not None:
            kind = CATEGORY_KINDS.get(cat.lower())
        if kind is None or event.ph != "X":
            skipped[cat if cat is not None else f"ph {event.ph}"] += 1
            continue
        ts, dur, name = event.ts, event.dur, event.name
        if ts is None or dur is None or dur < 0 or name is None:
            malformed += 1
            continue
        args = event.args if event.args is not None else no_args
        name_id = names.get(name)
        if name_id is None:
            name_id = names[name] = len(names)
        pid, tid = event.pid, event.tid
        corr, ext = args.correlation, args.external_id
        if not (
            type(pid) is int
            and type(tid) is int
            and LABEL_BASE < pid < _INT64
            and LABEL_BASE < tid < _INT64
        ):
            pid, tid = _label_id(pid, labels), _label_id(tid, labels)
        if not (type(corr) is int and type(ext) is int):
            corr, ext = _int_or(corr, NO_ID), _int_or(ext, NO_ID)
        if kind is kernel or kind is sync:
            stream = args.stream
            if stream is not None and 0 <= stream < _INT64:
                tid = stream
        if kind is cpu_op and name in SHAPED_OPS and args.input_dims is not msgspec.UNSET:
            dims, types = args.input_dims, args.input_type
            key = repr((dims, types))
            shapes.setdefault(key, (dims, types))
            op_shapes.append((len(floats[kind]) // 2, key))
        ints[kind].extend((name_id, pid, tid, corr, ext))
        floats[kind].extend((ts, dur))
    return columns.part(malformed, len(events))


def merge_parts(parts: Sequence[Part], path: str, metadata: Mapping[str, Any]) -> Trace:
    """The Trace of `parts` in file order: one name table, one set of columns. The
    parts' arrays are renumbered in place, then each column is gathered once."""
    names: dict[str, int] = {}
    labels: dict[str, int] = {}
    skipped: Counter[str] = Counter()
    malformed = count = 0
    op_shapes: dict[int, tuple[Any, Any]] = {}
    shapes: dict[str, tuple[Any, Any]] = {}
    op_rows = 0  # CPU-op rows in the parts before this one
    for part in parts:
        for key, value in part.shapes.items():
            shapes.setdefault(key, value)
        op_shapes.update((op_rows + row, shapes[key]) for row, key in part.op_shapes)
        if Kind.CPU_OP in part.ints:
            op_rows += len(part.ints[Kind.CPU_OP])
        name_map = np.array([names.setdefault(n, len(names)) for n in part.names] or [0])
        label_map = np.array(
            [LABEL_BASE - labels.setdefault(x, len(labels)) for x in part.labels] or [0]
        )
        for block in part.ints.values():
            block[:, 0] = name_map[block[:, 0]]
            for column in (1, 2):  # pid, tid: renumber the non-integer labels
                named = block[:, column] <= LABEL_BASE
                block[named, column] = label_map[LABEL_BASE - block[named, column]]
        skipped.update(part.skipped)
        malformed += part.malformed
        count += part.count
    info = metadata.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    return Trace(
        path=path,
        rank=_int_or(info.get("rank"), None),
        world_size=_int_or(info.get("world_size"), None),
        devices=_devices(metadata.get("deviceProperties")),
        names=tuple(names),
        tables={kind: _table(parts, kind) for kind in Kind},
        skipped=dict(skipped),
        malformed=malformed,
        event_count=count,
        op_shapes=op_shapes,
    )


def _table(parts: Sequence[Part], kind: Kind) -> EventTable:
    ints = [p.ints[kind] for p in parts if kind in p.ints]
    floats = [p.floats[kind] for p in parts if kind in p.floats]

    def gather(blocks: list[Any], column: int, dtype: type) -> Any:
        if not blocks:
            return np.zeros(0, dtype=dtype)
        return np.concatenate([b[:, column] for b in blocks])

    return EventTable(
        ts_us=gather(floats, 0, np.float64),
        dur_us=gather(floats, 1, np.float64),
        **{name: gather(ints, k, np.int64) for k, name in enumerate(_INT_COLUMNS)},
    )


def _label_id(value: Any, labels: dict[str, int]) -> int:
    as_int = _int_or(value, None)
    if as_int is not None and as_int > LABEL_BASE:
        return int(as_int)
    return LABEL_BASE - labels.setdefault(str(value), len(labels))


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
        return value if -_INT64 <= value < _INT64 else default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return _int_or(int(value), default)
    if isinstance(value, float) and value.is_integer():
        return _int_or(int(value), default)
    return default


def _devices(props: Any) -> tuple[TraceDevice, ...]:
    """Each named device of `deviceProperties`, with its SM count and memory."""
    if not isinstance(props, list):
        return ()
    return tuple(
        TraceDevice(
            name=str(p["name"]),
            sm_count=_positive(p.get("numSms")),
            memory_bytes=_positive(p.get("totalGlobalMem")),
        )
        for p in props
        if isinstance(p, dict) and p.get("name")
    )


def _positive(value: Any) -> int | None:
    number = _int_or(value, None)
    return number if number is not None and number > 0 else None
