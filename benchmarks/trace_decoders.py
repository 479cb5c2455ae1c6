"""Decoding a Kineto trace: orjson into dicts (what `lightspeed trace` reads with) against
msgspec into typed structs that keep only the fields the analyses read.

    .bench-venv/bin/pip install msgspec orjson numpy
    PYTHONPATH=src .bench-venv/bin/python benchmarks/trace_decoders.py /tmp/synth100.json \\
        ../shared/traces/hta-v100-train-memprof-rank1of2.json.gz --rounds 5

For each trace the events are read as the reader reads them, in runs of about 4 MB of JSON
text, and each run is decoded and turned into columns two ways, the ways taking turns
within each round:

- **orjson**: `orjson.loads` of the run into dicts, then `columns.build_part`, lightspeed's
  own loop (its checks included);
- **msgspec**: `msgspec.json.decode` of the run into `Event` structs (`ph`, `cat`, `name`,
  `ts`, `dur`, `pid`, `tid` and the four `args` the analyses read; every other field is
  skipped while decoding), then a loop that builds the same columns from their attributes
  with none of `build_part`'s checks: a lower bound on what a typed reader would cost.

It prints the median seconds per 100 MB of each way (decoding, and decoding with columns),
and how many runs msgspec refused: a typed decoder refuses valid Kineto JSON whose fields
have other types (a string `pid`, a `ts` given as a string), which the reader must still
read.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec
import orjson

from lightspeed.trace.columns import build_part

RUN_CHARS = 4_000_000


class Args(msgspec.Struct):
    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    stream: int | None = None
    input_dims: Any = msgspec.field(name="Input Dims", default=None)
    input_type: Any = msgspec.field(name="Input type", default=None)


class Event(msgspec.Struct):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: Args | None = None


_EVENTS = msgspec.json.Decoder(list[Event])


def runs(path: Path) -> list[str]:
    """The trace's events as runs of about RUN_CHARS characters of JSON, each a list."""
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    events = orjson.loads(text)["traceEvents"]
    found, run, size = [], [], 0
    for e in events:
        piece = orjson.dumps(e).decode()
        run.append(piece)
        size += len(piece)
        if size >= RUN_CHARS:
            found.append("[" + ",".join(run) + "]")
            run, size = [], 0
    if run:
        found.append("[" + ",".join(run) + "]")
    return found


def with_orjson(texts: list[str]) -> tuple[float, float]:
    decode = columns = 0.0
    for text in texts:
        t0 = time.perf_counter()
        events = orjson.loads(text)
        t1 = time.perf_counter()
        build_part(events)
        t2 = time.perf_counter()
        decode += t1 - t0
        columns += t2 - t0
    return decode, columns


def with_msgspec(texts: list[str]) -> tuple[float, float, int]:
    decode = columns = 0.0
    refused = 0
    for text in texts:
        t0 = time.perf_counter()
        try:
            events = _EVENTS.decode(text)
        except msgspec.ValidationError:
            refused += 1
            continue
        t1 = time.perf_counter()
        _struct_columns(events)
        t2 = time.perf_counter()
        decode += t1 - t0
        columns += t2 - t0
    return decode, columns, refused


def _struct_columns(events: list[Event]) -> tuple[list[int], list[float]]:
    """The columns `build_part` makes, from structs, without its checks."""
    names: dict[str, int] = {}
    ints: list[int] = []
    floats: list[float] = []
    for e in events:
        if e.ph != "X" or e.name is None or e.ts is None:
            continue
        name_id = names.get(e.name)
        if name_id is None:
            name_id = names[e.name] = len(names)
        a = e.args
        corr = a.correlation if a is not None and a.correlation is not None else -1
        ext = a.external_id if a is not None and a.external_id is not None else -1
        pid = e.pid if type(e.pid) is int else -2
        tid = e.tid if type(e.tid) is int else -2
        ints.extend((name_id, pid, tid, corr, ext))
        floats.extend((e.ts, e.dur or 0.0))
    return ints, floats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for path in args.traces:
        texts = runs(path)
        mb = sum(len(t) for t in texts) / 1e6
        o_dec, o_all, m_dec, m_all = [], [], [], []
        refused = 0
        for _ in range(args.rounds):
            d, c = with_orjson(texts)
            o_dec.append(d)
            o_all.append(c)
            d, c, refused = with_msgspec(texts)
            m_dec.append(d)
            m_all.append(c)

        def per_100(xs: list[float], mb: float = mb) -> float:
            return statistics.median(xs) / mb * 100

        print(
            f"{path.name}: {mb:.0f} MB of events in {len(texts)} runs; s per 100 MB: "
            f"orjson {per_100(o_dec):.2f} decode, {per_100(o_all):.2f} with columns; "
            f"msgspec {per_100(m_dec):.2f} decode, {per_100(m_all):.2f} with columns; "
            f"msgspec refused {refused} of {len(texts)} runs"
        )


if __name__ == "__main__":
    main()
