"""Many steps analysed together give what each step analysed alone gives: the interval
primitives of `intervals.Windows` against window-by-window clipping, and every
analyzer's `analyse_steps` against its `analyse`, on generated and real traces."""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kineto import KinetoTrace
from trace_paths import SHARED_TRACES, TRACES

from lightspeed.report import render_json
from lightspeed.report.trace_report import trace_document
from lightspeed.trace import analysis, intervals, load_trace
from lightspeed.trace.analysis import WINDOW_ANALYZERS, step_contexts
from lightspeed.trace.events import Trace
from lightspeed.trace.window import StepsContext, TraceContext

spans = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60)), max_size=30)
# Windows one after the other: a gap before each (negative: they overlap by a little,
# as a step's rounded end overlaps the next's start) and a length.
window_plan = st.lists(st.tuples(st.sampled_from([-0.5, 0.0, 3.0, 20.0]), st.integers(0, 50)))


def _of_window(parts: intervals.Parts, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Window `k`'s parts (parts sorted by window)."""
    window, s, e = parts
    a, b = np.searchsorted(window, [k, k + 1])
    return s[a:b], e[a:b]


def _windows(plan: list[tuple[float, int]]) -> tuple[np.ndarray, np.ndarray]:
    lo: list[float] = []
    hi: list[float] = []
    t = 0.0
    for gap, length in plan:
        start = max(t + gap, lo[-1] if lo else 0.0)
        lo.append(start)
        hi.append(start + length)
        t = start + length
    return np.array(lo), np.array(hi)


@given(spans, window_plan.filter(bool))
def test_windows_cut_and_merge_as_window_by_window_clipping_does(
    pairs: list[tuple[int, int]], plan: list[tuple[float, int]]
) -> None:
    starts = np.array([float(s) for s, _ in pairs])
    ends = np.array([float(s + d) for s, d in pairs])
    lo, hi = _windows(plan)
    windows = intervals.Windows.of(lo, hi)
    if windows is None:  # only where every fourth window still overlaps another
        s = intervals.MAX_STRIDE
        assert (lo[s:] < hi[:-s]).any()
        return
    parts = windows.spread(starts, ends)
    merged = windows.union(parts)
    which, step = windows.starting(starts)
    for k in range(len(lo)):
        clipped = intervals.clip(starts, ends, lo[k], hi[k])
        assert sorted(zip(*_of_window(parts, k), strict=True)) == sorted(zip(*clipped, strict=True))
        assert [a.tolist() for a in _of_window(merged, k)] == [
            a.tolist() for a in intervals.union(*clipped)
        ]
        inside = np.flatnonzero((starts >= lo[k]) & (starts < hi[k]))
        assert sorted(which[step == k].tolist()) == inside.tolist()


def test_windows_that_overlap_too_much_are_left_to_one_at_a_time() -> None:
    lo = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert intervals.Windows.of(lo, lo + 10.0) is None
    assert intervals.Windows.of(lo[::-1].copy(), lo[::-1] + 0.5) is None
    assert intervals.Windows.of(lo, lo + 0.5) is not None


def _close(a: Any, b: Any, where: str) -> None:
    """`a` equals `b` but for the last bits of float sums taken in another order."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        fields = [f.name for f in dataclasses.fields(a)]
        _close({f: getattr(a, f) for f in fields}, {f: getattr(b, f) for f in fields}, where)
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            _close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert np.allclose(a, b, rtol=1e-12, atol=0), where
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _each_analyzer_agrees(trace: Trace) -> int:
    """Every analyzer's results for the trace's steps, together and one at a time, the
    same; how many analyzers took the steps together."""
    ctx = TraceContext(trace)
    contexts = step_contexts(ctx)
    together = StepsContext.of(contexts)
    if together is None:
        return 0
    took = 0
    for analyzer in WINDOW_ANALYZERS:
        if analyzer.analyse_steps is None:
            continue
        fresh = StepsContext.of(step_contexts(ctx))  # nothing cached by the others
        assert fresh is not None
        found = analyzer.analyse_steps(fresh)
        if found is None:
            continue
        took += 1
        _close(found, [analyzer.analyse(c) for c in contexts], analyzer.key)
    return took


_LOADING = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
step_events = st.lists(
    st.tuples(
        st.sampled_from(["gemm", "nccl", "copy", "sync", "item", "loading", "op", "empty"]),
        st.integers(0, 900),  # when, from the step's start
        st.integers(0, 400),  # how long
        st.integers(-50, 700),  # the device's delay after the launch
    ),
    max_size=8,
)


@given(
    st.lists(
        st.tuples(st.sampled_from([-0.001, 0.0, 2.0, 300.0]), st.integers(1, 1000), step_events),
        min_size=1,
        max_size=20,
    ),
    st.booleans(),
)
def test_steps_analysed_together_are_each_step_analysed_alone(
    plan: list[tuple[float, int, list[tuple[str, int, int, int]]]], two_streams: bool
) -> None:
    trace = KinetoTrace(device_name="NVIDIA H100 80GB HBM3")
    t = 0.0
    for n, (gap, length, events) in enumerate(plan, start=1):
        t = max(0.0, t + gap)
        trace.step(n, t, length)
        for kind, at, dur, delay in events:
            ts = t + at
            if kind in ("gemm", "nccl", "empty"):
                name = {"gemm": "gemm", "nccl": "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}.get(
                    kind, "fill"
                )
                trace.launch(ts, ts + max(delay, 0), 0 if kind == "empty" else dur, name=name)
                if two_streams and at % 2:
                    trace.events[-1]["tid"] = 13
            elif kind == "copy":
                trace.copy_to_host(ts, ts + max(delay, 0), dur)
            elif kind == "sync":
                trace.runtime("cudaStreamSynchronize", ts, dur)
            elif kind == "item":
                trace.cpu_op("aten::item", ts, dur)
            elif kind == "loading":
                trace.cpu_op(_LOADING, ts, dur)
            else:
                trace.cpu_op("aten::mm", ts, dur)
        t += length
    with tempfile.TemporaryDirectory() as folder:
        loaded = load_trace(trace.write(Path(folder) / "t.json"))
    _each_analyzer_agrees(loaded)


def _real_traces() -> list[Path]:
    return sorted(TRACES.glob("*.json.gz")) + sorted(SHARED_TRACES.glob("*.json.gz"))


@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name)
def test_real_traces_steps_together_are_each_step_alone(path: Path) -> None:
    _each_analyzer_agrees(load_trace(path))


def test_a_rank_analysed_in_chunks_of_steps_is_the_rank_analysed_step_by_step(
    tmp_path: Path,
) -> None:
    trace = KinetoTrace(device_name="NVIDIA H100 80GB HBM3")
    t = 0.0
    for n in range(1, 41):
        trace.step(n, t, 500.0 + 30 * (n % 4))
        trace.cpu_op(_LOADING, t + 3, 40)
        trace.launch(t + 50, t + 90 + 5 * (n % 3), 200, name="gemm")
        trace.runtime("cudaStreamSynchronize", t + 60, 300)
        trace.copy_to_host(t + 380, t + 400, 20)
        t += 500.0 + 30 * (n % 4) - 0.001 * (n % 2)  # some steps overlap the next a little
    loaded = load_trace(trace.write(tmp_path / "t.json"))

    def written(at_once: int, together: int) -> bytes:
        with (
            patch.object(analysis, "STEPS_AT_ONCE", at_once),
            patch.object(analysis, "STEPS_TOGETHER", together),
        ):
            rank = analysis.analyse_rank(loaded, parallel=False)
        result = analysis.TraceAnalysis(
            ranks=[rank], skew=[], collectives=[], notes=[], findings=[]
        )
        return render_json.dumps_utf8(trace_document(result).data)

    assert written(at_once=7, together=2) == written(at_once=4096, together=10**9)


def test_steps_of_few_and_many_matrix_products_together_are_each_step_alone(
    tmp_path: Path,
) -> None:
    # Step n runs n - 1 products (few are summed in one go for all steps, 8 or more
    # step by step), of mixed precisions, one unaligned, fp32 ones fast enough for TF32.
    trace = KinetoTrace(device_name="NVIDIA H100 80GB HBM3")
    shapes = [
        ([[4096, 4096], [4096, 4096]], ["c10::BFloat16", "c10::BFloat16"], 200),
        ([[4100, 4096], [4096, 4096]], ["c10::BFloat16", "c10::BFloat16"], 400),
        ([[4096, 4096], [4096, 4096]], ["float", "float"], 1000),
        ([[64, 64], [64, 64]], ["float", "float"], 7),
    ]
    t = 0.0
    for n in range(1, 19):
        trace.step(n, t, 20_000)
        at = t + 5
        for k in range(n - 1):
            dims, types, kernel_us = shapes[(n + k) % len(shapes)]
            trace.cpu_op("aten::mm", at, 10, **{"Input Dims": dims, "Input type": types})
            trace.launch(at + 2, at + 20, kernel_us * (1 + 0.01 * k))
            at += 20 + kernel_us * 1.02
        t += 20_000
    loaded = load_trace(trace.write(tmp_path / "t.json"))
    assert _each_analyzer_agrees(loaded) == sum(
        a.analyse_steps is not None for a in WINDOW_ANALYZERS
    )
    contexts = step_contexts(TraceContext(loaded))
    products = [analysis.MATMULS.analyse(c) for c in contexts]
    assert [0 if m is None else m.ops for m in products] == list(range(18))
