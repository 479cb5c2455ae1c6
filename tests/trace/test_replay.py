"""A trace's steps replayed from its dependency graph (`trace.replay`): hand-built
timelines whose replay follows by hand, the same replay whatever the traced start times,
and real GPU traces reproduced."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from kineto import KinetoTrace, all_reduce_step
from trace_paths import SHARED_TRACES

from lightspeed.trace.events import Kind
from lightspeed.trace.load import load_trace
from lightspeed.trace.replay import replay_ranks, replay_steps, summary

GPU_DATA = Path(__file__).parent.parent / "data" / "gpu"


def _sync_bound(t: KinetoTrace, at: float = 0.0) -> None:
    # 20 launches of 5 µs every 10 µs, kernels of 100 µs queued behind each other, then
    # the host waits in cudaDeviceSynchronize and ends the step 8 µs after it returns.
    t.step(1, at + 0, 2030)
    for i in range(20):
        t.launch(at + 10 * i, at + 20 + 100 * i, 100)
    t.runtime("cudaDeviceSynchronize", at + 200, 1822)
    t.step(2, at + 2030, 100)
    t.launch(at + 2040, at + 2050, 10)


def test_a_sync_lasts_as_long_as_what_it_waits_for(tmp_path: Path) -> None:
    t = KinetoTrace()
    _sync_bound(t)
    replay = replay_steps(load_trace(t.write(tmp_path / "t.json")))
    (step,) = replay.steps  # the last step, cut by the profiler, is left out
    assert (step.number, replay.syncs) == (1, 1)
    # Each kernel is ready when its launch returns: the first at 5, the last ends at
    # 2005, when the sync returns; the step ends 8 µs later.
    assert step.replayed_s == pytest.approx(2013e-6)
    assert step.traced_s == pytest.approx(2030e-6)
    assert step.replayed_busy_s == pytest.approx(2000e-6)
    assert step.traced_busy_s == pytest.approx(2000e-6)


def test_the_replay_reads_no_traced_start_but_for_order(tmp_path: Path) -> None:
    t = KinetoTrace()
    _sync_bound(t)
    document = t.document()
    shifted = json.loads(json.dumps(document))
    jitter = random.Random(0)
    for event in shifted["traceEvents"]:
        event["ts"] += 1_000_000
        if event["cat"] == "kernel":  # later, in the same order, as a busier GPU would
            event["ts"] += 3 * event["args"]["correlation"] + jitter.uniform(0, 2)
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps(document))
    b.write_text(json.dumps(shifted))
    (one,) = replay_steps(load_trace(a)).steps
    (other,) = replay_steps(load_trace(b)).steps
    assert other.replayed_s == pytest.approx(one.replayed_s, abs=1e-12)
    assert other.replayed_busy_s == pytest.approx(one.replayed_busy_s, abs=1e-12)


def test_a_launch_bound_step_is_its_host(tmp_path: Path) -> None:
    # Kernels of 2 µs launched every 20 µs: the device waits on the host, and the step
    # is the host's 400 µs whatever the kernels take.
    t = KinetoTrace()
    t.step(1, 0, 400)
    for i in range(20):
        t.launch(20 * i, 20 * i + 6, 2)
    t.step(2, 400, 50)
    (step,) = replay_steps(load_trace(t.write(tmp_path / "t.json"))).steps
    assert step.replayed_s == pytest.approx(400e-6)
    assert step.replayed_busy_s == pytest.approx(40e-6)
    assert step.idle_points == pytest.approx(0.0)


def _waits_on_a_stream(path: Path, ran_at: float) -> Path:
    # A kernel of 100 µs on stream 7 (5..105); stream 8 made to wait for it, then a
    # kernel of 10 µs launched there, which ran at `ran_at`; a device sync until both end.
    t = KinetoTrace()
    t.step(1, 0, 130)
    t.launch(0, 5, 100)
    t.runtime("cudaStreamWaitEvent", 6, 1)
    t.launch(8, ran_at, 10, stream=8)
    t.runtime("cudaDeviceSynchronize", 14, max(105, ran_at + 10) - 14)
    t.step(2, 130, 20)
    t.launch(131, 136, 5)
    return t.write(path)


def test_a_stream_waits_for_the_task_its_event_follows(tmp_path: Path) -> None:
    # Stream 8's kernel ran at 105, once the first had ended.
    trace = load_trace(_waits_on_a_stream(tmp_path / "t.json", ran_at=105))
    (step,) = replay_steps(trace).steps
    assert step.replayed_s == pytest.approx(step.traced_s)
    assert step.replayed_busy_s == pytest.approx(110e-6)
    # The first kernel twice as fast: the second, waiting for it, starts 50 µs earlier.
    kernels = trace.table(Kind.KERNEL)
    faster = np.where(kernels.tid == 7, kernels.dur_us / 2, kernels.dur_us)
    (changed,) = replay_steps(trace, {Kind.KERNEL: faster}).steps
    assert changed.replayed_s == pytest.approx(step.replayed_s - 50e-6)


def test_a_wait_on_a_task_that_ended_after_the_waiter_began_is_no_edge(
    tmp_path: Path,
) -> None:
    # Stream 8's kernel ran at 20, while stream 7's was running: whatever the event
    # followed, it was not that kernel.
    (step,) = replay_steps(load_trace(_waits_on_a_stream(tmp_path / "t.json", ran_at=20))).steps
    assert step.replayed_busy_s == pytest.approx(100e-6)  # the two overlap, as traced


def test_a_graphs_nodes_keep_their_traced_waits(tmp_path: Path) -> None:
    # One graph launched at 0 (the call returns at 50): its first node runs at 10, while
    # the call is still on, its second 30 µs after the first ends (a wait inside the
    # graph, which the trace does not record), its third right after.
    t = KinetoTrace()
    t.step(1, 0, 200)
    t.graph_launch(0, 50, [(10, 40), (80, 20), (100, 60)])
    t.runtime("cudaDeviceSynchronize", 55, 105)
    t.step(2, 200, 20)
    t.launch(201, 206, 5)
    trace = load_trace(t.write(tmp_path / "t.json"))
    (step,) = replay_steps(trace).steps
    assert step.replayed_s == pytest.approx(step.traced_s)
    assert step.replayed_busy_s == pytest.approx(120e-6)
    # Each node keeps its wait, not its start: the first node 20 µs shorter moves the
    # others 20 µs earlier.
    kernels = trace.table(Kind.KERNEL)
    shorter = np.where(kernels.ts_us == 10, 20.0, kernels.dur_us)
    (changed,) = replay_steps(trace, {Kind.KERNEL: shorter}).steps
    assert changed.replayed_s == pytest.approx(step.replayed_s - 20e-6)


@pytest.mark.parametrize(
    "name", ["bert-base-fp32-cuda", "gpt2-small-bf16-cuda", "resnet50-bf16-cuda"]
)
def test_h200_traces_replay_within_two_percent(name: str) -> None:
    trace = load_trace(GPU_DATA / f"{name}.pt.trace.json.gz")
    replay = replay_steps(trace)
    assert len(replay.steps) == 2
    largest, _ = summary(replay.steps)
    assert largest < 0.02
    assert all(abs(s.idle_points) < 2 for s in replay.steps)


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="the shared traces are not here")
def test_a_shared_data_parallel_trace_replays_its_steps() -> None:
    trace = load_trace(SHARED_TRACES / "hta-a100-ddp-train-rank0of2.json.gz")
    replay = replay_steps(trace)
    assert len(replay.steps) == 2 and replay.syncs > 0
    largest, _ = summary(replay.steps)
    assert largest < 0.01


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="the shared traces are not here")
@pytest.mark.parametrize(
    "name",
    [
        "hta-a100-80gb-recsys-train-rank0of16",
        "hta-a100-recsys-train-rank3of8",
        "hta-v100-recsys-train-rank1of2",
    ],
)
def test_streams_waiting_on_collectives_and_graphs_keep_the_idle_share(name: str) -> None:
    # Recommendation models: the compute stream waits on all-to-all and all-reduce
    # streams, and one launches CUDA graphs. Without those waits their device idled up
    # to 17 points less than traced.
    replay = replay_steps(load_trace(SHARED_TRACES / f"{name}.json.gz"))
    largest, _ = summary(replay.steps)
    assert largest < 0.01
    assert all(abs(s.idle_points) < 5 for s in replay.steps)


def test_ranks_replayed_together_wait_for_the_last_to_arrive(tmp_path: Path) -> None:
    traces = [
        load_trace(all_reduce_step(0, 0).write(tmp_path / "r0.json")),
        load_trace(all_reduce_step(1, 200).write(tmp_path / "r1.json")),
    ]
    for replay in replay_ranks(traces):
        (step,) = replay.steps
        assert step.replayed_s == pytest.approx(315e-6)
    # Twice as fast a transfer (100 µs, rank 1's kernel, which waited for no one): the
    # all-reduce ends at 205 + 50 on both ranks, each step 10 µs after: 265.
    for replay in replay_ranks(traces, comm_speedup=2):
        (step,) = replay.steps
        assert step.replayed_s == pytest.approx(265e-6)
    # Rank 0 alone cannot know it waited: its kernel halves whole, wait included.
    (alone,) = replay_steps(traces[0]).steps
    assert alone.replayed_s == pytest.approx(315e-6)


def test_synthetic_rank_sets_join_every_collective(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, str(root / "benchmarks" / "synthetic_trace.py"), "--out",
         str(tmp_path / "ranks"), "--mb", "1", "--ranks", "2"],
        check=True, capture_output=True,
    )  # fmt: skip
    traces = [load_trace(tmp_path / "ranks" / f"rank{r}.pt.trace.json") for r in (0, 1)]
    # Each synthetic step's host waits only on its compute stream (`loss.item()`), never
    # on the all-reduces' stream: joined or not, and however fast they run, the steps
    # replay alike.
    for faster in (1.0, 4.0):
        joined = replay_ranks(traces, comm_speedup=faster)
        for trace, replay in zip(traces, joined, strict=True):
            alone = replay_steps(trace).steps
            assert len(replay.steps) == len(alone) > 5
            for a, b in zip(replay.steps, alone, strict=True):
                assert a.replayed_s == pytest.approx(b.replayed_s, rel=1e-9)
