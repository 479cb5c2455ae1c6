"""Read trace files (one per rank, or a directory of them) into `Trace`s."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import math
import multiprocessing
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from lightspeed import progress
from lightspeed.errors import TraceError
from lightspeed.trace.columns import Part, build_part, merge_parts
from lightspeed.trace.events import Trace
from lightspeed.trace.json_stream import CHUNK_CHARS, SplitFailed, TraceStream
from lightspeed.units import a_kind

# File names a directory of traces is searched for: Kineto writes `*.pt.trace.json`,
# often gzipped; other writers use plain `.json`.
TRACE_SUFFIXES = (".json", ".json.gz")
# The names torch.profiler's trace handler gives: where a directory has them, its other
# JSON files (configs, metrics) are not traces.
KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# Below this many bytes on disk a second process costs more than it saves.
PARALLEL_MIN_BYTES = 1 << 20
MB = 10**6  # the unit of reading progress
# How a stage whose count is MB read ends: "reading trace.json, MB".
IN_MB = ", MB"

KeyedPart = tuple[tuple[int, int], Part]


def load_trace(
    path: str | Path, *, parallel: bool | None = None, chunk_chars: int = CHUNK_CHARS
) -> Trace:
    """Read one trace file (`.json` or `.json.gz`), streaming its events.

    With `parallel` (by default: for files over PARALLEL_MIN_BYTES, where the process
    can fork safely) a second process reads the same file and decodes every other run
    of events (`TraceStream.keyed_batches`); only its columns come back. Should a run
    not decode (its cut fell inside a value), the file is read again by this process
    alone.
    """
    path = Path(path)
    size = _size(path)
    if parallel is None:
        parallel = can_fork() and size >= PARALLEL_MIN_BYTES
    with (
        progress.stage(f"reading {path.name}{IN_MB}"),
        progress.counting(mb_to_read(path)) as advance,
    ):
        read_mb = [0]

        def on_read(position: int) -> None:
            while read_mb[0] < math.ceil(position / MB):
                read_mb[0] += 1
                advance()

        if parallel:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
                other = pool.submit(keyed_parts, path, (1, 2), chunk_chars)
                try:
                    mine, metadata, not_utf8 = _keyed_parts(path, (0, 2), chunk_chars, on_read)
                    theirs = other.result()
                except SplitFailed:
                    other.cancel()
                else:
                    if theirs is not None:
                        parts = sorted(mine + theirs, key=lambda kp: kp[0])
                        return _trace(path, [p for _, p in parts], metadata, not_utf8)
        mine, metadata, not_utf8 = _keyed_parts(path, None, chunk_chars, on_read)
        return _trace(path, [p for _, p in mine], metadata, not_utf8)


def keyed_parts(path: Path, share: tuple[int, int], chunk_chars: int) -> list[KeyedPart] | None:
    """This share's parts of `path`, for the second process; None when the split failed."""
    try:
        return _keyed_parts(path, share, chunk_chars)[0]
    except SplitFailed:
        return None


def _keyed_parts(
    path: Path,
    share: tuple[int, int] | None,
    chunk_chars: int,
    on_read: Callable[[int], None] | None = None,
) -> tuple[list[KeyedPart], dict[str, Any], int]:
    """This share's parts of `path` (all of them with None), its top-level values, and
    the byte sequences of the whole file that were not UTF-8 (every share reads it all)."""
    stream = TraceStream(path, chunk_chars, on_read, typed=True)
    with no_cycle_collection():
        parts = [(key, build_part(batch)) for key, batch in stream.keyed_batches(share)]
    return parts, stream.metadata, stream.not_utf8


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused. Decoding, analysing a long trace's steps and
    writing them make millions of objects and no reference cycles (reference counts
    free them all); the collector would walk every live one again and again as they
    pile up (1 GB of 93,320 steps: 8 of 37 s)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _trace(path: Path, parts: list[Part], metadata: dict[str, Any], not_utf8: int) -> Trace:
    events = metadata.get("traceEvents")
    if events is not None and not isinstance(events, list):
        raise TraceError(f"{path}: traceEvents is {a_kind(events)}, not an array of events.")
    trace = merge_parts(parts, str(path), metadata)
    if trace.event_count == 0:
        raise TraceError(f"{path}: holds no trace events; is it a profiler trace?")
    return dataclasses.replace(trace, not_utf8=not_utf8) if not_utf8 else trace


def release_free_memory() -> None:
    """Hand the heap memory that decoding freed back to the system (glibc's
    `malloc_trim`; nothing elsewhere). Millions of short-lived objects leave the heap
    with free pages that the analyses' arrays, allocated apart, could not reuse."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def can_fork() -> bool:
    """Whether a second process can be forked from this one safely (see the comment)."""
    # A forked child inherits only the calling thread; torch's thread pools (loaded by
    # `observe()` and the profile) would be left half-copied.
    return "fork" in multiprocessing.get_all_start_methods() and "torch" not in sys.modules


def mb_to_read(path: Path) -> int:
    """The MB (10**6 bytes, at least one) that reading `path` counts as it goes."""
    return max(1, math.ceil(_size(path) / MB))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def trace_files(paths: Sequence[str | Path]) -> list[Path]:
    """The trace files `paths` name: files as given, directories by their trace files
    (`*.pt.trace.json[.gz]` where there are any, else every `*.json[.gz]`)."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(_trace_files_in(path))
            if not found:
                raise _no_traces_in(path)
            kineto = [p for p in found if p.name.endswith(KINETO_SUFFIXES)]
            files += kineto or found
        elif not path.exists():
            raise TraceError(f"{path}: no such file or directory.")
        else:
            files.append(path)
    return files


def _no_traces_in(folder: Path) -> TraceError:
    """The error for a directory with no trace file: where its subfolders hold some (one
    profiling cycle each, as torchtitan and torchtune write `iteration_N/`), it names
    them and the latest to give."""
    cycles = sorted(
        (p for p in folder.iterdir() if p.is_dir() and any(_trace_files_in(p))),
        key=lambda p: (int(m.group()) if (m := re.search(r"\d+", p.name)) else -1, p.name),
    )
    if not cycles:
        return TraceError(f"{folder}: no *.json or *.json.gz trace files in this directory.")
    names = ", ".join(p.name for p in cycles[:6]) + (", …" if len(cycles) > 6 else "")
    return TraceError(
        f"{folder}: no trace files here, but its folders {names} hold some (a profiling cycle"
        f" each): give one, e.g. `lightspeed trace {cycles[-1]}` (the latest)."
    )


def _trace_files_in(folder: Path) -> Iterator[Path]:
    return (p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def load_traces(paths: Sequence[str | Path]) -> list[Trace]:
    """Every trace `paths` name, each with a rank: its own, a number in its file name
    (`…rank3…`), or its position, in that order of preference; sorted by rank. Two
    traces of one rank are an error: they come from different runs."""
    ranked: dict[int, Trace] = {}
    for position, path in enumerate(trace_files(paths)):
        trace = load_trace(path)
        rank = rank_of(trace, position)
        if rank in ranked:
            raise same_rank(ranked[rank].path, trace.path, rank)
        ranked[rank] = dataclasses.replace(trace, rank=rank)
    release_free_memory()
    return [ranked[rank] for rank in sorted(ranked)]


def rank_of(trace: Trace, position: int) -> int:
    """The rank of `trace`, the `position`-th file given: its own, a number in its file
    name (`…rank3…`), or its position, in that order of preference."""
    if trace.rank is not None:
        return trace.rank
    match = _RANK_IN_NAME.search(Path(trace.path).name)
    return int(match.group(1)) if match else position


def same_rank(first: str, second: str, rank: int) -> TraceError:
    """The error of two traces given for one rank."""
    return TraceError(
        f"{first} and {second} are both rank {rank}: give the traces of one run, one per"
        " rank (or each run's on its own)."
    )
