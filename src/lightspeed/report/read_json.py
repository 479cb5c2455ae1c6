"""Read a JSON result as lightspeed writes it, its long lists left in the file.

A trace of a hundred thousand steps writes them as a list an item a line
(`render_json.Streamed`): 445 MB for a 1 GB trace, which as Python objects would take
several GB. `load` reads the rest of the document and gives each such list as `OnDisk`:
a sequence that reads and parses its items from the file when they are asked for, so
a report drawn from a long trace's result holds one step at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from lightspeed.report.render_json import Items

# What stands for a list left in the file while the rest is parsed: no JSON string
# lightspeed writes begins with a NUL.
_MARK = "\x00lightspeed on disk "
# Items read from the file at once when they are iterated.
_LINES_A_READ = 256


class OnDisk(Items):
    """The items of a list of a JSON file, each the compact JSON text of one line,
    parsed when asked for (`items[i]`, iterating: in order, a few hundred lines a read).
    Equal to a list of the same items."""

    def __init__(
        self, path: Path, starts: np.ndarray, ends: np.ndarray, stamp: tuple[int, int, int]
    ) -> None:
        """Items at byte offsets [starts[i], ends[i]) of `path`, as it was when it was
        read (`stamp`)."""
        self._path, self._starts, self._ends, self._stamp = path, starts, ends, stamp

    def __len__(self) -> int:
        return len(self._starts)

    def _get(self, i: int) -> Any:
        start, end = int(self._starts[i]), int(self._ends[i])
        with self._opened() as f:
            f.seek(start)
            return orjson.loads(f.read(end - start))

    def _opened(self) -> BinaryIO:
        """The file, refused (ValueError) if it changed since it was read."""
        f = self._path.open("rb")
        if _stamp(os.fstat(f.fileno())) != self._stamp:
            f.close()
            raise ValueError(f"{self._path} changed since it was read")
        return f

    def __iter__(self) -> Iterator[Any]:
        with self._opened() as f:
            for first in range(0, len(self), _LINES_A_READ):
                last = min(len(self), first + _LINES_A_READ) - 1
                base = int(self._starts[first])
                f.seek(base)
                block = f.read(int(self._ends[last]) - base)
                for start, end in zip(
                    self._starts[first : last + 1].tolist(),
                    self._ends[first : last + 1].tolist(),
                    strict=True,
                ):
                    yield orjson.loads(block[start - base : end - base])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, OnDisk)):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OnDisk({str(self._path)!r}, {len(self)} items)"


def load(path: str | Path) -> Any:
    """The JSON document in `path`, as `json.load` would give it, except that each list
    whose items are objects written a line each (as `render_json` writes a streamed
    list) is an `OnDisk` of them. Raises what `json.loads` raises for what is not JSON
    (a line of such a list that is not is found when it is read)."""
    target = Path(path)
    with target.open("rb") as f:
        stamp = _stamp(os.fstat(f.fileno()))
        scanned = _scan(f)
    if scanned is None:  # not as lightspeed writes a list: read whole
        return json.loads(target.read_bytes())
    skeleton, runs = scanned
    doc = json.loads(skeleton)
    if not runs:
        return doc
    lists = [
        OnDisk(target, np.array(s, dtype=np.int64), np.array(e, dtype=np.int64), stamp)
        for s, e in runs
    ]
    return _placed(doc, lists)


def _scan(lines: Iterable[bytes]) -> tuple[bytes, list[tuple[list[int], list[int]]]] | None:
    """The document with each list of objects a line each replaced by a mark, and each
    such list's items' byte offsets (starts, ends); None where a list is not as
    `render_json` writes one (an item after one without a comma, a comma after the last,
    the file ending inside it)."""
    skeleton: list[bytes] = []
    runs: list[tuple[list[int], list[int]]] = []
    starts: list[int] = []
    ends: list[int] = []
    comma = False  # the last item read ends with a comma: another must follow
    at = 0
    for line in lines:
        item = _item(line) if starts or _opens_list(skeleton) else None
        if item is not None and (comma or not starts):
            starts.append(at + item[0])
            ends.append(at + item[1])
            comma = item[2]
        elif starts and (comma or line.strip() not in (b"]", b"],")):
            return None
        else:
            if starts:
                skeleton.append(json.dumps(f"{_MARK}{len(runs)}").encode() + b"\n")
                runs.append((starts, ends))
                starts, ends = [], []
            skeleton.append(line)
        at += len(line)
    return None if starts else (b"".join(skeleton), runs)


def _stamp(status: os.stat_result) -> tuple[int, int, int]:
    """What tells one version of a file from another: its inode (a file written anew is
    renamed over the old one), size and modification time."""
    return status.st_ino, status.st_size, status.st_mtime_ns


def _opens_list(skeleton: list[bytes]) -> bool:
    """Whether the last line read outside lists opens a list."""
    return bool(skeleton) and skeleton[-1].rstrip().endswith(b"[")


def _item(line: bytes) -> tuple[int, int, bool] | None:
    """Where in `line` an object written on one line lies (its start and end) and
    whether a comma follows it, or None for any other line: JSON written indented puts
    an object with members on several."""
    body = line.rstrip(b"\r\n")
    comma = body.endswith(b",")
    if comma:
        body = body[:-1]
    text = body.lstrip(b" ")
    if len(text) < 3 or text[:1] != b"{" or text[-1:] != b"}":
        return None
    return len(body) - len(text), len(body), comma


def _placed(value: Any, lists: list[OnDisk]) -> Any:
    """`value` with each list of one mark replaced by the list it marks."""
    if isinstance(value, dict):
        return {k: _placed(v, lists) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) == 1 and isinstance(value[0], str) and value[0].startswith(_MARK):
            return lists[int(value[0][len(_MARK) :])]
        return [_placed(v, lists) for v in value]
    return value
