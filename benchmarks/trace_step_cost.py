"""What one step of a long trace costs `lightspeed trace`, stage by stage, in µs a step.

    .venv/bin/python benchmarks/synthetic_trace.py --out /tmp/synth100s.json --mb 100 --layers 1
    PYTHONPATH=src .venv/bin/python benchmarks/trace_step_cost.py /tmp/synth100s.json

A trace of the same size with more, shorter steps has the same events, so what it costs
more is what each step costs: this reads the trace once, then times, on `--steps` of its
steps analysed together as `lightspeed trace` analyses them (the best of `--repeats`):
each window analysis, the diagnosis (the rules' facts, then the rules), packing the
results into columns, and writing the steps' JSON texts from the columns. Then, for the
same count of numbers a step as its JSON holds, the least that writing them costs: as
one JSON text a step (a key a number, as the row layout must), and as one JSON list a
number (a column a field).
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from lightspeed.document import findings_data
from lightspeed.rules import diagnose
from lightspeed.trace import analysis, packed
from lightspeed.trace.diagnosis import WindowFacts, step_facts
from lightspeed.trace.load import load_trace
from lightspeed.trace.packed import pack, scalar_texts
from lightspeed.trace.window import Fields, StepsContext, TraceContext, WindowContext


def _best(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The shortest of `repeats` runs (seconds) and the last run's result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def _numbers(text: bytes) -> int:
    """How many numbers a step's JSON holds."""

    def count(value: Any) -> int:
        if isinstance(value, dict):
            return sum(map(count, value.values()))
        if isinstance(value, list):
            return sum(map(count, value))
        return int(isinstance(value, (int, float)) and not isinstance(value, bool))

    return count(orjson.loads(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    gc.disable()  # as `lightspeed trace` runs (`load.no_cycle_collection`)
    ctx = TraceContext(load_trace(args.trace))
    _, _, windows = analysis._rank_steps(ctx)
    whole, counted, _ = analysis.hta_whole_trace_window(ctx.trace, ctx.device, False)
    # What the steps share, indexed once per trace as the whole trace's analysis does.
    analysis.analyse_window(WindowContext(ctx, whole, np.flatnonzero(counted), hta_times=True))
    chosen = windows[: args.steps]
    n = len(chosen)
    contexts = [
        WindowContext(ctx, w, rows, device_span_us=span, inside=True) for w, rows, span in chosen
    ]

    def shared() -> StepsContext | None:
        # What every analysis of the steps reads: their events, each one's step, extents.
        steps = StepsContext.of(contexts)
        if steps is not None:
            _ = steps.events, steps.owner, steps.extents
        return steps

    seconds, together = _best(shared, args.repeats)
    if together is None:
        raise SystemExit("these steps cannot be analysed together; give another trace")
    print(f"{args.trace}: {len(windows):,} steps, {n:,} of them timed, best of {args.repeats}")
    rows: list[tuple[str, float]] = [("the steps' events, together", seconds)]
    results: dict[str, Any] = {}
    for a in analysis.WINDOW_ANALYZERS:
        assert a.analyse_steps is not None
        seconds, results[a.key] = _best(lambda a=a: a.analyse_steps(together), args.repeats)
        rows.append((f"analysis: {a.key}", seconds))
    facts = [WindowFacts(**{f: results[k][i] for f, k in analysis._FACTS}) for i in range(n)]
    seconds, made = _best(lambda: [step_facts(f) for f in facts], args.repeats)
    rows.append(("diagnosis: the rules' facts", seconds))
    seconds, diagnoses = _best(lambda: [diagnose(f) for f in made], args.repeats)
    rows.append(("diagnosis: the rules", seconds))
    seconds, _ = _best(lambda: {k: pack(v) for k, v in results.items()}, args.repeats)
    rows.append(("packing into columns", seconds))
    steps = analysis.StepAnalyses(
        numbers=[c.window.number for c in contexts],
        results=results,
        bounds=[d.bound for d in diagnoses],
        findings=[d.findings for d in diagnoses],
        step_s=[f.step_s for f in facts],
        has_device=[f.has_device for f in facts],
    )

    def texts() -> list[bytes]:
        steps._texts = None  # made again each time
        return steps.texts(0, n)

    seconds, written = _best(texts, args.repeats)
    rows.append(("JSON texts of the steps", seconds))
    total = sum(s for _, s in rows)
    width = max(len(name) for name, _ in rows)
    for name, s in rows:
        print(f"  {name:<{width}}  {s / n * 1e6:7.1f} µs")
    print(f"  {'all':<{width}}  {total / n * 1e6:7.1f} µs a step")

    numbers = round(sum(map(_numbers, written[:64])) / min(64, n))
    size = sum(map(len, written)) / n
    print(f"\nA step's JSON: {size:,.0f} bytes, {numbers} numbers")
    rng = random.Random(0)
    columns = [np.array([rng.random() * 1e-3 for _ in range(n)]) for _ in range(numbers)]
    keys = [f"figure_{i}" for i in range(numbers)]
    template = b"{" + b",".join(orjson.dumps(k) + b":%b" for k in keys) + b"}"

    def as_rows() -> list[bytes]:
        values = [scalar_texts(c.tolist()) for c in columns]
        return [template % row for row in zip(*values, strict=True)]

    def as_columns() -> list[bytes]:
        return [orjson.dumps(c, option=orjson.OPT_SERIALIZE_NUMPY) for c in columns]

    for name, run in (("a JSON object a step", as_rows), ("a JSON list a number", as_columns)):
        seconds, _ = _best(run, args.repeats)
        print(f"  {numbers} numbers a step written as {name}: {seconds / n * 1e6:6.1f} µs a step")
    for flat, lists in ((False, "a text a step"), (True, "their items' columns")):
        seconds, texts_by_column = _best(lambda flat=flat: _as_columns(steps, flat), args.repeats)
        size = sum(map(len, texts_by_column)) / n
        print(
            f"  these steps written a column a figure, the lists within a step (its kernels) as"
            f" {lists}: {seconds / n * 1e6:.1f} µs a step, {size:,.0f} bytes"
        )


def _as_columns(steps: analysis.StepAnalyses, flat: bool = False) -> list[bytes]:
    """A sketch of the steps' JSON as columns, to time it: each packed number column
    written by one orjson call from its array, a dataclass's fields as an object of
    columns, anything else (lists, dicts of varied keys) a JSON text a step (with `flat`,
    a list of dataclasses a step as their columns and each step's count); the properties
    `Fields` writes, from the results made again; the findings a text a step.
    (Written per part of steps, not joined across parts: the cost is the same.)"""
    numeric = orjson.OPT_SERIALIZE_NUMPY

    def column(part: Any, n: int) -> bytes:
        if isinstance(part, packed._Numbers):
            return orjson.dumps(part.array, option=numeric)
        if isinstance(part, packed._Same):
            return b"[" + b",".join([packed.dumps(part.value)] * n) + b"]"
        if isinstance(part, packed._Records):
            fields = zip(part.names, part.parts, strict=True)
            return b"{" + b",".join(orjson.dumps(k) + b":" + column(p, n) for k, p in fields) + b"}"
        if flat and isinstance(part, packed._Runs) and isinstance(part.items, packed._Records):
            # A list a step as its items' columns and each step's count of them.
            counts = np.diff(part.offsets)
            items = column(part.items, int(part.offsets[-1]))
            return b'{"count":' + orjson.dumps(counts, option=numeric) + b',"items":' + items + b"}"
        return b"[" + b",".join(part.texts(n)) + b"]"

    out = []
    for p, numbers in enumerate(steps._numbers):
        n = len(numbers)
        for a in analysis.WINDOW_ANALYZERS:
            if a.data is None:
                continue
            results = steps._results[p][a.key]
            out.append(column(results._part, n))
            if isinstance(a.data, Fields) and a.data.properties:
                made = results.values()
                for _, attribute in a.data.properties:
                    out.append(orjson.dumps([getattr(r, attribute, None) for r in made]))
        found = steps._findings[p].values()
        out.append(b"[" + b",".join(packed.dumps(findings_data(f)) for f in found) + b"]")
    return out


if __name__ == "__main__":
    main()
