"""Stream the events of a Chrome-trace JSON file one at a time, in bounded memory.

A Kineto trace is one JSON object whose `traceEvents` array holds nearly all of its
bytes (or, in the plain Chrome format, the array alone). The array is read in chunks
and each event decoded on its own with the standard library's C decoder, so memory
holds one chunk and one event, never the document. Every other top-level value
(`deviceProperties`, `distributedInfo`, …) is small and is decoded whole.

Decoding only builds dicts, lists, strings and numbers: trace content is never
evaluated. Bytes that are not UTF-8 (a name cut in the middle of a character, as
profilers have written) are read as U+FFFD and counted (`TraceStream.not_utf8`), so one
bad name does not cost the trace; a file that is not JSON and has them is called what
it likely is, a binary file.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from lightspeed.errors import TraceError
from lightspeed.trace.columns import decode_events

# Decoding a window's events makes Python objects of about 20× its size: a small window
# keeps that transient small; more windows cost little.
CHUNK_CHARS = 1 << 17
# A batch of decoded events and a key that sorts batches in file order.
Key_Batch = tuple[tuple[int, int], list[Any]]
_WHITESPACE = " \t\n\r"
_SEPARATORS = re.compile(r"[ \t\n\r,]*")
# The last "}, {" of a window: greedy ".*" puts the match at the final boundary.
_LAST_BOUNDARY = re.compile(r"(?s:.*)(\}[ \t\n\r]*,[ \t\n\r]*\{)")
_GZIP_MAGIC = b"\x1f\x8b"
_EVENTS_KEY = "traceEvents"
# Byte sequences that were not UTF-8, read as U+FFFD by this thread so far: a stream
# counts its own as the difference (a thread reads one stream at a time).
_DECODED = threading.local()


def _not_utf8_so_far() -> int:
    found: int = getattr(_DECODED, "not_utf8", 0)
    return found


def _replaced_and_counted(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    _DECODED.not_utf8 = _not_utf8_so_far() + 1
    return "\ufffd", exc.end


codecs.register_error("lightspeed.trace", _replaced_and_counted)


class TraceStream:
    """The top-level values of a trace file and an iterator over its events.

    Iterate `events()` once; `metadata` (the top-level values other than
    `traceEvents`) is complete after that, since Kineto writes some of them after the
    array. Errors name the file and what is wrong.
    """

    def __init__(
        self,
        path: Path,
        chunk_chars: int = CHUNK_CHARS,
        on_read: Callable[[int], None] | None = None,
        *,
        typed: bool = False,
    ) -> None:
        self.path = path
        # Runs of events as `columns.Event`s where msgspec reads them so (the loader's
        # way: faster, and no dict per event), else as dicts.
        self._decode: Callable[[str], list[Any]] = decode_events if typed else orjson.loads
        # Told the bytes of the file read so far (of the gzip file, for one), as it reads.
        self.on_read = on_read
        self.metadata: dict[str, Any] = {}
        self._share: tuple[int, int] | None = None
        self._run = 0
        self._chunk = chunk_chars
        self._decoder = json.JSONDecoder()
        # Byte sequences of the file that were not UTF-8, read as U+FFFD (complete
        # once the events are read).
        self.not_utf8 = 0

    def events(self) -> Iterator[Any]:
        """Each element of the events array, decoded, in file order."""
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[Any]]:
        """The elements of the events array, decoded, in file order, a chunk's worth at a time."""
        for _, batch in self.keyed_batches():
            yield batch

    def keyed_batches(self, share: tuple[int, int] | None = None) -> Iterator[Key_Batch]:
        """Batches of elements with a key that sorts them in file order.

        With `share=(i, n)` the events array is cut into runs at fixed places (the last
        `}, {` of each window), run k is decoded only when k % n == i, and what follows
        the last run is decoded only by share 0: n processes reading the same file with
        shares 0…n−1 decode every element exactly once between them. A run that does not
        decode raises SplitFailed (its cut fell inside a value); read without sharing.
        """
        self._share = share
        self._run = 0
        with _open_text(self.path) as fh:
            reader = _Reader(fh, self._chunk, self._fail, self.on_read)
            try:
                first = reader.next_char()
                if first == "[":
                    yield from self._array(reader)
                elif first == "{":
                    yield from self._object(reader)
                elif first == "":
                    self._fail("is empty", reader)
                else:
                    self._fail(f"starts with {first!r}, not a JSON object or array", reader)
            except RecursionError:
                # Kineto's events nest a few levels deep; a value nested past Python's
                # recursion limit is no profiler event.
                self._fail("nests arrays or objects thousands of levels deep", reader)
            if reader.next_char() != "":
                self._fail("has data after the end of the JSON document", reader)
            self.not_utf8 = fh.not_utf8

    def _object(self, reader: _Reader) -> Iterator[Key_Batch]:
        reader.pos += 1
        if reader.next_char() == "}":
            reader.pos += 1
            return
        while True:
            key = reader.decode(self._decoder)
            if not isinstance(key, str):
                self._fail("has a top-level key that is not a string", reader)
            reader.expect(":")
            if key == _EVENTS_KEY and reader.next_char() == "[":
                yield from self._array(reader)
            else:
                self.metadata[key] = reader.decode(self._decoder)
            if reader.next_char() == ",":
                reader.pos += 1
                continue
            reader.expect("}")
            return

    def _array(self, reader: _Reader) -> Iterator[Key_Batch]:
        """Decode the array at the cursor, one batch per window of the file.

        Each window's run of whole elements (up to its last `}, {`) is decoded in one
        orjson call. Without sharing, the careful loop then decodes what remains of
        the window; an element cut by the window's end (it fails to decode, or ends
        exactly there) waits for the next chunk. When shared, the rest waits for the
        next window's run instead, until the end of the file. At the end of the file
        the careful `_Reader.decode` reports what is wrong.
        """
        reader.pos += 1
        decode = self._decoder.raw_decode
        skip = _SEPARATORS.match  # whitespace, commas, and a trailing comma before "]"
        while True:
            buf, pos = reader.buf, reader.pos
            end_of_window = len(buf)
            pos = skip(buf, pos).end()  # type: ignore[union-attr]
            run = self._decode_run(buf, pos)
            if run is not None:
                pos, values = run
                if values:
                    yield (self._run - 1, 0), values
                if self._share is not None:
                    reader.pos = pos
                    if reader.fill():
                        continue
            if self._share is not None and reader.fill():
                continue
            batch: list[Any] = []
            while True:
                pos = skip(buf, pos).end()  # type: ignore[union-attr]
                if pos >= end_of_window:
                    break
                if buf[pos] == "]":
                    reader.pos = pos + 1
                    if self._owns_rest():
                        yield (self._run - 1, 1), batch
                    return
                try:
                    value, end = decode(buf, pos)
                except json.JSONDecodeError:
                    break
                if end >= end_of_window:
                    break
                batch.append(value)
                pos = end
            reader.pos = pos
            if batch and self._owns_rest():
                yield (self._run - 1, 1), batch
            if not reader.fill():
                if reader.next_char() == "":
                    self._fail("ends in the middle of the event array (truncated?)", reader)
                last = reader.decode(self._decoder)  # raises on what is wrong
                if self._owns_rest():
                    yield (self._run - 1, 2), [last]

    def _owns_rest(self) -> bool:
        return self._share is None or self._share[0] == 0

    def _decode_run(self, buf: str, pos: int) -> tuple[int, list[Any]] | None:
        """(end, elements) of the run of whole elements from `pos` to the window's last
        `}, {` boundary, decoded in one call when it is this share's; None when the
        window has no boundary, or the run does not decode (unshared: the careful loop
        takes over).

        `[` + text + `]` parses only when the text is a run of complete elements (a cut
        inside a string or a nested value leaves it unbalanced).
        """
        # Anchored: `.*` already spans every later start, and a search with no boundary
        # in the window would retry from each position (quadratic in the window).
        boundary = _LAST_BOUNDARY.match(buf, pos)
        if boundary is None:
            return None
        cut = boundary.start(1) + 1  # just past the "}"
        run = self._run
        self._run += 1
        if self._share is not None and run % self._share[1] != self._share[0]:
            return cut, []
        try:
            return cut, self._decode("[" + buf[pos:cut] + "]")
        except orjson.JSONDecodeError:
            if self._share is not None:
                raise SplitFailed(str(self.path)) from None
            self._run -= 1
            return None

    def _fail(self, what: str, reader: _Reader | None = None) -> Any:
        where = "" if reader is None else f" (near character {reader.offset})"
        if reader is not None and reader.fh.not_utf8:
            raise TraceError(
                f"{self.path}: {what}{where}, and {reader.fh.not_utf8:,} of its byte sequences"
                " are not UTF-8 text; is it a profiler trace, not a binary file?"
            )
        raise TraceError(f"{self.path}: {what}{where}; is it a complete profiler trace?")


class SplitFailed(Exception):
    """A shared read cut the events array inside a value: read it without sharing."""


class _Reader:
    """A window on a text stream, refilled in chunks as decoding moves along it."""

    def __init__(
        self,
        fh: _SafeText,
        chunk: int,
        fail: Callable[[str, _Reader], Any],
        on_read: Callable[[int], None] | None = None,
    ) -> None:
        self.fh = fh
        self.on_read = on_read
        self.chunk = chunk
        self.buf = ""
        self.pos = 0
        self.base = 0  # characters dropped from the front of buf
        self.eof = False
        self.fail = fail

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def fill(self) -> bool:
        """Read one more chunk; False at the end of the file."""
        if self.eof:
            return False
        # As much again as is waiting undecoded: a value far longer than a chunk (a
        # huge string) is then retried a logarithmic, not a linear, number of times.
        text = self.fh.read(max(self.chunk, len(self.buf) - self.pos))
        if self.on_read is not None:
            self.on_read(self.fh.position())
        if not text:
            self.eof = True
            return False
        if self.pos > len(self.buf) // 2:
            self.base += self.pos
            self.buf = self.buf[self.pos :]
            self.pos = 0
        self.buf += text
        return True

    def next_char(self) -> str:
        """The next character that is not whitespace ("" at the end), without consuming it."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, char: str) -> None:
        found = self.next_char()
        if found != char:
            shown = repr(found) if found else "the end of the file"
            self.fail(f"expected {char!r} but found {shown}", self)
        self.pos += 1

    def decode(self, decoder: json.JSONDecoder) -> Any:
        """The JSON value at the cursor, reading more of the file while it is cut off."""
        if self.next_char() == "":
            self.fail("ends in the middle of the JSON document (truncated?)", self)
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                # A value cut by the chunk boundary fails like a malformed one; only
                # at the end of the file is the failure real.
                if self.fill():
                    continue
                if exc.pos >= len(self.buf) - 1 or exc.msg.startswith("Unterminated string"):
                    self.fail("ends in the middle of an event (truncated?)", self)
                self.pos = exc.pos
                self.fail(f"is not valid JSON: {exc.msg}", self)
            # A number at the very end of the window may continue in the next chunk.
            at_edge = end == len(self.buf) and self.buf[end - 1] not in '}]"'
            if at_edge and self.fill():
                continue
            self.pos = end
            return value


def _open_text(path: Path) -> _SafeText:
    """`path` as text, decompressed when it is gzip; errors name the file."""
    try:
        raw = path.open("rb")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file.") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory; pass it as a trace directory.") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror}).") from None
    magic = raw.peek(2)[:2] if isinstance(raw, io.BufferedReader) else b""
    binary: Any = gzip.GzipFile(fileobj=raw) if magic == _GZIP_MAGIC else raw
    text = io.TextIOWrapper(binary, encoding="utf-8", errors="lightspeed.trace")
    return _SafeText(text, path, raw)


class _SafeText(io.TextIOBase):
    """A text stream whose decompression and decoding errors become TraceErrors."""

    def __init__(self, inner: io.TextIOWrapper, path: Path, raw: io.BufferedReader) -> None:
        self.inner = inner
        self.path = path
        self.raw = raw
        self._not_utf8_before = _not_utf8_so_far()

    @property
    def not_utf8(self) -> int:
        """Byte sequences read so far that were not UTF-8 (read as U+FFFD)."""
        return _not_utf8_so_far() - self._not_utf8_before

    def position(self) -> int:
        """Bytes of the file read so far (ahead of what is decoded by a buffer)."""
        return self.raw.tell()

    def read(self, size: int | None = -1) -> str:
        try:
            return self.inner.read(size)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise TraceError(
                f"{self.path}: the gzip data is truncated or corrupt ({exc})."
            ) from None

    def close(self) -> None:
        self.inner.close()
        super().close()
