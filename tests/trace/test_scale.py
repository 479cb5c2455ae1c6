"""What keeps a long trace linear: events found by start through a sorted index, unions
cut by binary search, steps analysed in two processes, a terminal table that lists a
few of many steps. Each is checked against the plain computation it replaces."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kineto import KinetoTrace
from trace_paths import trace

from factories import RunCli, run_in_terminal
from lightspeed import progress
from lightspeed import trace as lightspeed_trace
from lightspeed.errors import TraceError
from lightspeed.report import render_json
from lightspeed.report.steps_shown import SHOWN_STEPS, step_numbers
from lightspeed.report.trace_report import shown_steps, trace_document
from lightspeed.trace import analysis as lightspeed_analysis
from lightspeed.trace import intervals, load_trace
from lightspeed.trace.analysis import TraceAnalysis, analyse_rank
from lightspeed.trace.events import TimeOrder
from lightspeed.trace.ranks import (
    GZIP_RATIO,
    MEMORY_SHARE,
    check_memory,
    memory_need,
    pool_size,
)

times = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), min_size=0, max_size=40).map(
    lambda pairs: (
        np.array([float(s) for s, _ in pairs]),
        np.array([float(s + d) for s, d in pairs]),
    )
)
windows = st.tuples(st.integers(-10, 260), st.integers(0, 80))


@given(times, windows, st.booleans())
def test_the_index_finds_what_a_scan_of_every_event_finds(
    spans: tuple[np.ndarray, np.ndarray], window: tuple[int, int], until_hi: bool
) -> None:
    start, end = spans
    lo, hi = float(window[0]), float(window[0] + window[1])
    order = TimeOrder.of(start, end)
    starting = (start >= lo) & ((start <= hi) if until_hi else (start < hi))
    assert (
        order.starting_in(lo, hi, until_hi=until_hi).tolist() == np.flatnonzero(starting).tolist()
    )
    overlapping = (start < hi) & (end > lo)
    assert order.overlapping(lo, hi).tolist() == np.flatnonzero(overlapping).tolist()


@given(times, windows)
def test_a_union_cut_by_binary_search_is_the_union_clipped(
    spans: tuple[np.ndarray, np.ndarray], window: tuple[int, int]
) -> None:
    union = intervals.union(*spans)
    lo, hi = float(window[0]), float(window[0] + window[1])
    cut, clipped = intervals.within(union, lo, hi), intervals.clip(*union, lo, hi)
    assert [a.tolist() for a in cut] == [a.tolist() for a in clipped]


def _many_steps(path: Path, steps: int, slow_us: float = 0.0) -> Path:
    """`steps` steps of a data load, three launches and a copy back, at a drifting pace;
    every fourth step `slow_us` longer."""
    trace = KinetoTrace(device_name="NVIDIA H100 80GB HBM3")
    t = 0.0
    for n in range(1, steps + 1):
        length = 900.0 + 37.0 * (n % 7) + (slow_us if n % 4 == 0 else 0.0)
        trace.step(n, t, length)
        trace.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 5, 60)
        for i in range(3):
            trace.launch(t + 80 + 40 * i, t + 120 + 150 * i, 120 + n % 5, name=f"gemm{i}")
        trace.copy_to_host(t + 300, t + 600, 30)
        t += length + 3.0 * (n % 3)
    return trace.write(path)


def test_steps_analysed_in_two_processes_are_the_steps_analysed_in_one(tmp_path: Path) -> None:
    trace = load_trace(_many_steps(tmp_path / "long.json", 70))

    def result(parallel: bool) -> bytes:
        rank = analyse_rank(trace, parallel=parallel)
        analysis = TraceAnalysis(ranks=[rank], skew=[], collectives=[], notes=[], findings=[])
        return render_json.dumps_utf8(trace_document(analysis).data)

    assert len(analyse_rank(trace).steps) == 70
    assert result(parallel=True) == result(parallel=False)


def test_a_long_trace_lists_its_ends_and_slowest_steps_and_summarises_the_rest(
    tmp_path: Path,
) -> None:
    rank = analyse_rank(load_trace(_many_steps(tmp_path / "long.json", 70)), parallel=False)
    shown = shown_steps(rank.steps)
    listed = [w for w in shown if w is not None]
    numbers = [w.step for w in listed]
    assert len(listed) < SHOWN_STEPS < len(rank.steps)
    assert all(w.step in numbers for w in (*rank.steps[:5], *rank.steps[-5:]))
    # no step left out is slower than the fifth slowest
    fifth = sorted(w.step_s for w in rank.steps)[-5]
    assert all(w.step_s <= fifth for w in rank.steps if w.step not in numbers)
    assert numbers == sorted(numbers)
    gaps = [i for i, w in enumerate(shown) if w is None]
    assert gaps and all(shown[i - 1] is not None and shown[i + 1] is not None for i in gaps)


def _document(analysis: TraceAnalysis) -> bytes:
    return render_json.dumps_utf8(trace_document(analysis).data)


def test_ranks_read_by_a_pool_are_the_ranks_read_one_by_one(tmp_path: Path) -> None:
    # Two ranks of one run, and a third whose rank only its file name gives.
    files = [trace("hta-recsys-128ranks-sampled-rank0"), trace("hta-recsys-128ranks-sampled-rank1")]
    files.append(_many_steps(tmp_path / "worker-rank7.json", 3))
    alone = lightspeed_trace.analyse(files, workers=1)
    told = tmp_path / "told.jsonl"
    with progress.listening(_written_to(told)):
        pooled = lightspeed_trace.analyse(files, workers=2)
    assert [r.rank for r in pooled.ranks] == [0, 1, 7]
    assert _document(pooled) == _document(alone)
    # Only this process draws: the workers' MB and ranks reach it through shared counts.
    lines = [json.loads(line) for line in told.read_text().splitlines()]
    assert {pid for pid, _, _ in lines} == {os.getpid()}
    last = {stages[-1]: count for _, stages, count in lines if stages}
    assert last["reading: 3 of 3 traces, MB"] == [3, 3]  # a tiny file counts one MB
    assert last["analysing the ranks"] == [3, 3]


@pytest.mark.skipif(
    sys.platform == "win32" or (os.cpu_count() or 1) < 2, reason="needs a terminal, two cores"
)
def test_a_terminal_sees_the_pool_read_and_analyse_the_ranks(tmp_path: Path) -> None:
    for rank in range(2):
        _many_steps(tmp_path / f"rank{rank}.json", 30)
    out = tmp_path.parent / f"{tmp_path.name}-out.json"
    command = [sys.executable, "-m", "lightspeed", "trace", str(tmp_path), "--json", str(out)]
    code, shown = run_in_terminal(command, {**os.environ, "TERM": "xterm", "COLUMNS": "160"})
    assert code == 0 and out.exists()
    for stage in ("in 2 processes", "reading: 2 of 2 traces, MB", "analysing the ranks"):
        assert stage in shown


def _written_to(path: Path) -> Callable[[tuple[str, ...]], None]:
    """A progress listener appending its process, the stages and the count to `path`
    (a forked process's calls would land there too)."""

    def listener(stages: tuple[str, ...]) -> None:
        with path.open("a") as told:
            told.write(json.dumps([os.getpid(), stages, progress.counted()]) + "\n")

    return listener


def test_two_traces_of_one_rank_are_refused_by_the_pool_as_by_one_reader(tmp_path: Path) -> None:
    files = [_many_steps(tmp_path / f"run{i}-rank3.json", 2) for i in range(2)]
    for workers in (1, 2):
        with pytest.raises(TraceError, match="are both rank 3"):
            lightspeed_trace.analyse(files, workers=workers)


@given(
    st.lists(st.integers(1, 10**10), min_size=1, max_size=12),
    st.integers(0, 10**11),
    st.booleans(),
)
def test_the_pool_fits_the_cores_the_files_and_the_memory(
    sizes: list[int], available: int, gzipped: bool
) -> None:
    files = [Path(f"/nonexistent/{i}.json{'.gz' if gzipped else ''}") for i in range(len(sizes))]
    with patch.object(Path, "stat", autospec=True) as stat:
        stat.side_effect = lambda p: SimpleNamespace(st_size=sizes[int(p.name.split(".")[0])])
        n = pool_size(files, available)
    need = memory_need(max(sizes) * (GZIP_RATIO if gzipped else 1))
    assert 1 <= n <= min(os.cpu_count() or 1, len(files))
    assert n == 1 or n * need <= MEMORY_SHARE * available


def test_ranks_read_on_a_dask_cluster_are_the_ranks_read_one_by_one(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    files = [trace("hta-recsys-128ranks-sampled-rank0"), trace("hta-recsys-128ranks-sampled-rank1")]
    files.append(_many_steps(tmp_path / "worker-rank7.json", 3))
    alone = lightspeed_trace.analyse(files, workers=1)
    told = tmp_path / "told.jsonl"
    with progress.listening(_written_to(told)):
        on_dask = lightspeed_trace.analyse(files, workers=2, executor="dask")
    assert _document(on_dask) == _document(alone)
    lines = [json.loads(line) for line in told.read_text().splitlines()]
    last = {stages[-1]: count for _, stages, count in lines if stages}
    assert last["reading the traces"] == last["analysing the ranks"] == [3, 3]


def test_an_unknown_executor_is_one_line(run_cli: RunCli) -> None:
    code, _, err = run_cli("trace", str(trace("hta-a100-alexnet-benchmark")), "--executor", "ray")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--executor ray: give local" in err


def test_reading_a_trace_counts_its_megabytes(tmp_path: Path) -> None:
    path = _many_steps(tmp_path / "long.json", 2500)
    total = math.ceil(path.stat().st_size / 1e6)
    seen: list[tuple[tuple[str, ...], tuple[int, int] | None]] = []
    with progress.listening(lambda stages: seen.append((stages, progress.counted()))):
        load_trace(path, parallel=False)
    counts = [count for _, count in seen if count is not None]
    assert total > 1 and counts[-1] == (total, total)
    assert [done for done, _ in counts] == sorted(done for done, _ in counts)
    assert any("reading long.json, MB" in stages for stages, _ in seen)


def test_analysing_a_traces_steps_counts_them_a_lot_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lightspeed_analysis, "STEPS_AT_ONCE", 128)
    trace = load_trace(_many_steps(tmp_path / "long.json", 300), parallel=False)
    seen: list[tuple[tuple[str, ...], tuple[int, int] | None]] = []
    with progress.listening(lambda stages: seen.append((stages, progress.counted()))):
        analysed = analyse_rank(trace, parallel=False)
    assert len(analysed.steps) == 300
    counts = [count for stages, count in seen if stages == ("analysing the steps",) and count]
    assert counts == [(0, 300), (128, 300), (256, 300), (300, 300)]


def test_a_trace_too_large_for_the_memory_allowed_is_refused_before_it_is_read(
    run_cli: RunCli, tmp_path: Path
) -> None:
    path = _many_steps(tmp_path / "long.json", 200)
    size = path.stat().st_size
    with patch("lightspeed.trace.load.load_trace") as read:  # never reached
        with pytest.raises(TraceError, match="more than --max-memory"):
            lightspeed_trace.analyse([path], max_memory_bytes=int(memory_need(size)) - 1)
        read.assert_not_called()
    assert lightspeed_trace.analyse([path], max_memory_bytes=int(memory_need(size)) + 1)
    code, _, err = run_cli("trace", str(path), "--max-memory", str(size))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--max-memory" in err


def test_ranks_read_here_are_held_together_and_on_a_cluster_one_by_one(tmp_path: Path) -> None:
    files = [_many_steps(tmp_path / f"rank{r}.json", 50) for r in range(2)]
    one = memory_need(max(f.stat().st_size for f in files))
    both = memory_need(sum(f.stat().st_size for f in files))
    limit = int((one + both) / 2)  # one trace fits, both do not
    with pytest.raises(TraceError, match="these 2 traces: reading and analysing"):
        check_memory(files, limit, True)
    check_memory(files, limit, True, together=False)


def test_a_long_trace_of_two_ranks_lists_a_few_steps_and_findings_across_them(
    run_cli: RunCli, tmp_path: Path
) -> None:
    for r in range(2):
        _many_steps(tmp_path / f"rank{r}.json", 40, slow_us=400.0 * r)
    out_json = tmp_path / "t.json"
    code, out, _ = run_cli("trace", str(tmp_path), "--json", str(out_json))
    assert code == 0
    across = " ".join(out[out.index("Across ranks") :].replace("│", " ").split())
    doc = json.loads(out_json.read_text())
    skewed = [f for f in doc["findings"] if f["kind"] == "rank-skew"]
    assert len(doc["skew"]) == 40 and len(skewed) == 10  # the JSON keeps every one
    assert across.count("[rank-skew]") == 3 and "… and 7 more rank-skew findings" in across
    assert "40 steps, shown: the first and last 5 and the 5 whose ranks differ most" in across
    # The five steps listed besides the ends are among the slow ones.
    listed = {int(m) for m in re.findall(r"(?:^| )(\d+) [\d.]+ [mµ]s \(1\)", across)}
    middle = {s for s in listed if 5 < s < 36}
    assert middle and middle <= {8, 12, 16, 20, 24, 28, 32}
    assert "slowest most often: rank 1 in 10;" in across  # steps alike on both ranks: none


@given(st.sets(st.integers(0, 300), max_size=60))
def test_step_numbers_in_a_line_are_runs_that_give_back_the_numbers(chosen: set[int]) -> None:
    numbers = sorted(chosen)
    text = step_numbers(numbers)
    if len(numbers) <= 12:
        assert text == ", ".join(map(str, numbers))
        return
    listed, count = text.rsplit(" (", 1)
    assert count == f"{len(numbers):,} steps)"
    if "…" in listed:
        return  # runs left out: only the count stands for them
    back = []
    for run in listed.split(", "):
        first, _, last = run.partition("–")
        back += range(int(first), int(last or first) + 1)
    assert back == numbers
