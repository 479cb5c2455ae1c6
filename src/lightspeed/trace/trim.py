"""Cut a written trace down to its first whole steps that fit a size limit.

A profiler records every event of the steps it is asked for, and a step of a large model
can be hundreds of MB of JSON; a training callback that records a few steps on every rank
must not leave gigabytes behind. `trim_trace` reads a trace twice, streaming (never the
whole document in memory): first the size of each event and when it belongs, then it
writes the events of the first K steps, the largest K whose events fit in `max_bytes` of
JSON (at least one step). An event belongs to the time its host side began: a kernel or
copy to the start of the runtime call that launched it (`correlation`), since the device
runs behind the host, so a kept step keeps its kernels even where they run into the
next step's host time; an event with no time (metadata) is always kept, and so is what
comes before the first step. The top-level values other than `traceEvents`
(`deviceProperties`, `distributedInfo`, …) are kept whole.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from lightspeed.trace.events import CATEGORY_KINDS, Kind
from lightspeed.trace.json_stream import TraceStream
from lightspeed.trace.names import profiler_step

_DEVICE_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.SYNC})


@dataclasses.dataclass(frozen=True)
class Trimmed:
    """What `trim_trace` kept: steps out of those recorded, and JSON bytes of events."""

    steps_kept: int
    steps_recorded: int
    bytes_kept: int
    bytes_recorded: int


def trim_trace(path: Path, max_bytes: int) -> Trimmed | None:
    """Rewrite the trace at `path` (gzipped where its name ends in .gz) with its first
    steps that fit in `max_bytes` of events' JSON (see the module docstring); None, and
    nothing written, where it fits already or has no ProfilerStep to cut at."""
    known = _document_bytes(path)
    if known is not None and known <= max_bytes:
        return None  # its events, written compactly, are no larger than the document
    stream = TraceStream(path)
    sizes, times, step_starts = _measure(stream)
    total = int(sizes.sum())
    if total <= max_bytes or len(step_starts) < 2:
        return None
    order = np.argsort(times, kind="stable")
    cumulative = np.cumsum(sizes[order])
    starts = np.sort(np.array(step_starts))
    # Keeping k steps keeps every event that began before step k + 1 did.
    kept_bytes = [
        int(cumulative[np.searchsorted(times[order], cut, side="left") - 1]) for cut in starts[1:]
    ]
    fits = [k for k, size in enumerate(kept_bytes, start=1) if size <= max_bytes]
    k = max(fits, default=1)
    cut = float(starts[k])
    _write(path, stream.metadata, times < cut)
    return Trimmed(k, len(starts), kept_bytes[k - 1], total)


def _measure(stream: TraceStream) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Each event's JSON size and the time its host side began (−inf: no time), and
    the host start of each ProfilerStep."""
    sizes: list[int] = []
    own: list[float] = []
    device: list[bool] = []
    correlation: list[int] = []
    launched_at: dict[int, float] = {}
    step_starts: list[float] = []
    for event in stream.events():
        sizes.append(len(orjson.dumps(event)) + 1)
        ts = _time(event)
        own.append(ts)
        kind = (
            CATEGORY_KINDS.get(str(event.get("cat", "")).lower())
            if isinstance(event, dict)
            else None
        )
        args = event.get("args") if isinstance(event, dict) else None
        corr = args.get("correlation") if isinstance(args, dict) else None
        is_device = kind in _DEVICE_KINDS
        device.append(is_device)
        correlation.append(corr if isinstance(corr, int) and is_device else -1)
        if kind is Kind.RUNTIME and isinstance(corr, int):
            launched_at[corr] = ts
        if kind is Kind.ANNOTATION and profiler_step(str(event.get("name", ""))) is not None:
            step_starts.append(ts)
    times = np.array(
        [
            launched_at.get(c, t) if d and c >= 0 else t
            for t, d, c in zip(own, device, correlation, strict=True)
        ],
        dtype=np.float64,
    )
    return np.array(sizes, dtype=np.int64), times, step_starts


def _document_bytes(path: Path) -> int | None:
    """The size of the JSON document at `path` without reading it: a plain file's own, a
    gzip file's from its trailer (of one member, as torch.profiler writes it), which
    holds the size modulo 2³²: exact only where deflate, at most 1032:1, cannot reach 4
    GiB, a file under 4 MB; None where unknown."""
    size = path.stat().st_size
    if not path.name.endswith(".gz"):
        return size
    if size * 1032 >= 2**32 or size < 18:
        return None
    with path.open("rb") as f:
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


def _time(event: Any) -> float:
    ts = event.get("ts") if isinstance(event, dict) else None
    if isinstance(ts, (int, float)) and math.isfinite(ts):
        return float(ts)
    if isinstance(ts, str):  # Kineto writes some timestamps as strings
        try:
            return float(ts)
        except ValueError:
            pass
    return -math.inf


def _write(path: Path, metadata: dict[str, Any], keep: np.ndarray) -> None:
    """Write the events `keep` marks (in file order) and `metadata` in place of `path`."""
    partial = path.with_name(path.name + ".trimmed")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(partial, "wb") as out:
        out.write(b"{")
        for key, value in metadata.items():
            out.write(orjson.dumps(key) + b":" + orjson.dumps(value) + b",")
        out.write(b'"traceEvents":[')
        first = True
        for event, kept in zip(TraceStream(path).events(), keep.tolist(), strict=True):
            if kept:
                out.write((b"" if first else b",") + orjson.dumps(event))
                first = False
        out.write(b"]}")
    os.replace(partial, path)
