"""Decoding a Kineto trace: orjson into dicts against msgspec into typed structs that keep
only the fields the analyses read (`lightspeed.trace.columns.Event`, what the reader now
decodes with, falling back to orjson's dicts for a run of events msgspec refuses).

    PYTHONPATH=src .venv/bin/python benchmarks/trace_decoders.py /tmp/synth100.json \\
        ../shared/traces/hta-v100-train-memprof-rank1of2.json.gz --rounds 5

For each trace the events are cut into runs of about 4 MB of JSON text, as the reader
cuts them, and each run is decoded and turned into columns (`columns.build_part`, its
checks included) two ways, taking turns within each round:

- **orjson**: `orjson.loads` of the run into dicts, then `build_part`'s loop over dicts;
- **msgspec**: `columns.decode_events` (typed `Event` structs; every other field skipped
  while decoding), then `build_part`'s loop over structs.

It prints the median seconds per 100 MB of each way (decoding alone, and with columns),
and how many runs msgspec refused (decoded as dicts instead): a typed decoder refuses
valid Kineto JSON whose fields have other types (a string `ts`, a float `pid`).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from lightspeed.trace.columns import Event, build_part, decode_events

RUN_CHARS = 4_000_000


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


def timed(texts: list[str], decode: Any) -> tuple[float, float, int]:
    """Seconds decoding the runs, seconds decoding them and making columns, and how many
    runs came back as dicts where structs were asked for."""
    decoding = columns = 0.0
    as_dicts = 0
    for text in texts:
        t0 = time.perf_counter()
        events = decode(text)
        t1 = time.perf_counter()
        build_part(events)
        t2 = time.perf_counter()
        decoding += t1 - t0
        columns += t2 - t0
        as_dicts += decode is decode_events and not isinstance(events[0], Event)
    return decoding, columns, as_dicts


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
            d, c, _ = timed(texts, orjson.loads)
            o_dec.append(d)
            o_all.append(c)
            d, c, refused = timed(texts, decode_events)
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
