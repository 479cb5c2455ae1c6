"""Draw a `Document` as JSON, in the frame every file lightspeed writes carries: a
`schema_version`, what the document is (`document`), when it was made (`created_at`,
UTC, from an injected clock) and by which lightspeed. Strict JSON (no NaN or
infinity) and atomic writes."""

from __future__ import annotations

import abc
import datetime
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, overload

import orjson

from lightspeed.document import Document

# 2: timing `median_s` and `replicates` (were `step_time_s` and `n`); one vocabulary of
# bounds (`compute`, `memory`, `overhead`, …) and finding kinds; trace matmuls without
# `sol_time_s` (it was kernel time), with `unaligned_by_precision`; `created_at` and
# `lightspeed_version` in the frame; profile totals with the time in ops of unknown FLOPs;
# trace whole-trace figures as HTA counts them (`last_step_left_out`), `idle_causes`.
# 3: what the HTML report draws kept in the result: a profile's memory `over_step` (bytes
# live by category as the step ran) and `environment` (torch version), a trace rank's
# `timeline` of one step.
# 4: a workload's `parameter_tensors` (trainable parameter tensors; null where older).
SCHEMA_VERSION = 4
# Profile documents of these versions hold the same facts and still load.
READABLE_PROFILE_VERSIONS = (1, 2, 3, 4)

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _version() -> str:
    try:
        return metadata.version("lightspeed")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def frame(kind: str, body: dict[str, Any], clock: Clock = utc_now) -> dict[str, Any]:
    """`body` stamped with the schema version, what the document is, and when and by
    which lightspeed it was made."""
    return {
        "schema_version": SCHEMA_VERSION,
        "document": kind,
        "created_at": clock().astimezone(datetime.timezone.utc).isoformat(timespec="seconds"),
        "lightspeed_version": _version(),
        **body,
    }


def render(doc: Document, clock: Clock = utc_now) -> dict[str, Any]:
    """The JSON object of `doc`: its data in the frame, with its `warnings`."""
    return frame(doc.kind, {**doc.data, "warnings": list(doc.warnings)}, clock)


def dumps(obj: dict[str, Any]) -> str:
    """Strict JSON text, indented (see `dumps_utf8`)."""
    return dumps_utf8(obj).decode()


class Items(Sequence[Any]):
    """A sequence whose i-th item is made when it is asked for (`_get(i)`, 0 ≤ i < its
    length): `items[-1]` and slices as a list has them."""

    @abc.abstractmethod
    def _get(self, i: int) -> Any:
        """The i-th item, made (0 ≤ i < its length)."""

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._get(k) for k in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._get(i % len(self))


class Streamed(Items):
    """A long list of a JSON document whose items are made one at a time: `item(i)`
    makes the i-th. `write` makes and writes them one after the other, so a trace of a
    hundred thousand steps never holds all of them as JSON objects, nor all their text;
    anywhere else it is the list of them. Its items are written one a line, without
    indentation inside them (a step of a long trace takes a third fewer bytes, and each
    line can be read apart). `texts(start, stop)`, where given, gives the items'
    compact JSON texts at once (what orjson writes of each), for writing them without
    making them."""

    def __init__(
        self,
        count: int,
        item: Callable[[int], Any],
        texts: Callable[[int, int], list[bytes]] | None = None,
    ) -> None:
        self._count, self._item, self.texts = count, item, texts

    def __len__(self) -> int:
        return self._count

    def _get(self, i: int) -> Any:
        return self._item(i)


_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
_ITEM_OPTIONS = orjson.OPT_NON_STR_KEYS


def _as_list(value: Any) -> Any:
    if isinstance(value, Streamed):
        return list(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def dumps_utf8(obj: dict[str, Any]) -> bytes:
    """Strict JSON, indented (a `Streamed` list an item a line), as UTF-8: non-finite
    floats (an infinite intensity) become null (orjson's rule; `finite` is the same rule
    for a value kept in Python)."""
    # orjson: a long trace's result is hundreds of MB, which the standard library takes
    # seconds to write; bytes, so that a file is written without a copy as text.
    return b"".join(pieces(obj))


def pieces(obj: dict[str, Any]) -> Iterator[bytes]:
    """`dumps_utf8(obj)` in pieces, each `Streamed` list's items made as they are
    written, a line each, a few hundred a piece."""
    streams: list[Streamed] = []

    def marked(value: Any) -> Any:
        if isinstance(value, Streamed):
            streams.append(value)
            return f"{_MARK}{len(streams) - 1}"
        if isinstance(value, dict):
            return {k: marked(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [marked(v) for v in value]
        return value

    text = orjson.dumps(marked(obj), option=_OPTIONS)
    done = 0
    for i, stream in enumerate(streams):
        mark = orjson.dumps(f"{_MARK}{i}")
        at = text.index(mark, done)
        line = text[text.rfind(b"\n", 0, at) + 1 : at]
        indent = line[: len(line) - len(line.lstrip(b" "))]
        yield text[done:at]
        if not stream:
            yield b"[]"
        else:
            inner = b",\n" + indent + b"  "
            start = b"[\n" + indent + b"  "
            for lot in _texts(stream):
                yield start + inner.join(lot)
                start = inner
            yield b"\n" + indent + b"]"
        done = at + len(mark)
    yield text[done:]


def _texts(stream: Streamed) -> Iterator[list[bytes]]:
    """A streamed list's items' compact JSON texts, a few hundred at a time."""
    for start in range(0, len(stream), _ITEMS_A_PIECE):
        stop = min(len(stream), start + _ITEMS_A_PIECE)
        if stream.texts is not None:
            yield stream.texts(start, stop)
        else:
            yield [
                orjson.dumps(stream[i], option=_ITEM_OPTIONS, default=_as_list)
                for i in range(start, stop)
            ]


# A Streamed list's items written a piece at a time: one write and one join, not each.
_ITEMS_A_PIECE = 256

# What stands for a Streamed list while the rest of the document is written: no JSON
# string lightspeed writes begins with a NUL.
_MARK = "\x00lightspeed streamed list "


def write(path: Path, obj: dict[str, Any]) -> Path:
    """Write `obj` to `path` as JSON, atomically, `Streamed` lists item by item."""
    return write_pieces(path, pieces(obj))


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically (a failure never leaves half a file)."""
    return write_bytes(path, text.encode("utf-8"), newline=False)


def write_bytes(path: str | Path, data: bytes, *, newline: bool = True) -> Path:
    """Write `data` (and, with `newline`, a line end after it) to `path` atomically (a
    failure never leaves half a file)."""
    return write_pieces(path, [data], newline=newline)


def write_pieces(path: str | Path, data: Iterable[bytes], *, newline: bool = True) -> Path:
    """Write the pieces of `data` one after the other (and, with `newline`, a line end
    after them) to `path` atomically (a failure never leaves half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with tmp.open("wb") as out:
            for piece in data:
                out.write(piece)
            if newline:
                out.write(b"\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(target)
    return target


def as_read_back(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as reading its JSON file back gives it (non-finite floats null, tuples
    lists): what a report drawn from the file would see."""
    loaded: dict[str, Any] = json.loads(dumps(obj))
    return loaded


def finite(value: Any) -> Any:
    """`value` with every non-finite float (nested in dicts and lists) made None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
