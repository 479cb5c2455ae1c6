"""Read trace files (one per rank, or a directory of them) into `Trace`s."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from lightspeed.errors import TraceError
from lightspeed.trace.events import Trace, TraceBuilder
from lightspeed.trace.json_stream import TraceStream

# File names a directory of traces is searched for: Kineto writes `*.pt.trace.json`,
# often gzipped; other writers use plain `.json`.
TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def load_trace(path: Path) -> Trace:
    """Read one trace file (`.json` or `.json.gz`), streaming its events."""
    stream = TraceStream(path)
    builder = TraceBuilder()
    for batch in stream.batches():
        builder.add_all(batch)
    events = stream.metadata.get("traceEvents")
    if events is not None and not isinstance(events, list):
        raise TraceError(
            f"{path}: traceEvents is a {type(events).__name__}, not an array of events."
        )
    trace = builder.build(str(path), stream.metadata)
    if trace.event_count == 0:
        raise TraceError(f"{path}: holds no trace events; is it a profiler trace?")
    return trace


def trace_files(paths: Sequence[Path]) -> list[Path]:
    """The trace files `paths` name: files as given, directories by their trace files."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
            )
            if not found:
                raise TraceError(f"{path}: no *.json or *.json.gz trace files in this directory.")
            files += found
        elif not path.exists():
            raise TraceError(f"{path}: no such file or directory.")
        else:
            files.append(path)
    return files


def load_traces(paths: Sequence[Path]) -> list[Trace]:
    """Every trace `paths` name, each with a rank: its own, a number in its file name
    (`…rank3…`), or its position, in that order of preference; sorted by rank."""
    traces = [load_trace(p) for p in trace_files(paths)]
    ranked = []
    for position, trace in enumerate(traces):
        rank = trace.rank
        if rank is None:
            match = _RANK_IN_NAME.search(Path(trace.path).name)
            rank = int(match.group(1)) if match else position
        ranked.append(dataclasses.replace(trace, rank=rank))
    return sorted(ranked, key=lambda t: t.rank or 0)
