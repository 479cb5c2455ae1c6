"""Host syncs against device idle time, and collectives matched across ranks, on small
traces whose figures follow by hand from their timelines (µs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto import KinetoTrace

from lightspeed.report.render_json import render
from lightspeed.report.trace_report import trace_document
from lightspeed.rules import Bound
from lightspeed.trace.analysis import TraceAnalysis, analyse_rank, analyse_traces
from lightspeed.trace.load import load_trace, load_traces

ALL_REDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
BROADCAST = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)"


def test_an_item_after_every_kernel_drains_the_device(tmp_path: Path) -> None:
    # Every 40 µs: launch (t..t+5) a kernel (t+8..t+18); `.item()` (t+6..t+24) copies
    # the result back (t+18..t+20) and waits in cudaStreamSynchronize (t+12..t+24).
    t = KinetoTrace()
    t.step(1, 0, 800)
    for i in range(20):
        at = 40 * i
        t.launch(at, at + 8, 10)
        t.cpu_op("aten::item", at + 6, 18)
        t.copy_to_host(at + 7, at + 18, 2)
        t.runtime("cudaStreamSynchronize", at + 12, 12)
    (step,) = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    h = step.host
    assert (h.syncs, h.sync_s) == (20, pytest.approx(20 * 18e-6))
    # The device drains at t+20, inside the item, and idles until the next kernel at
    # t+48: 19 gaps of 28 µs, and the last 780..800.
    assert h.sync_idle_gaps_s == pytest.approx((19 * 28 + 20) * 1e-6)
    # The item's time with the device idle: t+20..t+24, and t+6..t+8 before the kernel.
    assert h.sync_while_idle_s == pytest.approx(20 * 6e-6)
    # Lost: the drained gaps, and the first item's 6..8 in the gap the step begins with.
    assert h.sync_lost_s == pytest.approx(554e-6)
    assert step.bound is Bound.SYNCHRONIZATION
    (finding,) = [f for f in step.findings if f.kind == "synchronization"]
    assert finding.evidence["sync_lost_s"] == pytest.approx(554e-6)
    assert finding.evidence["max_speedup"] == pytest.approx(1 / (1 - 554 / 800))


def test_a_sync_that_waits_on_a_busy_device_costs_nothing(tmp_path: Path) -> None:
    # 20 kernels queued in the first 200 µs run back to back (20..2020) while the host
    # waits in cudaDeviceSynchronize (200..2022): a GPU-bound step, not a sync-bound one.
    t = KinetoTrace()
    t.step(1, 0, 2030)
    for i in range(20):
        t.launch(10 * i, 20 + 100 * i, 100)
    t.runtime("cudaDeviceSynchronize", 200, 1822)
    (step,) = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    h = step.host
    assert h.sync_s == pytest.approx(1822e-6)  # 90% of the step in the sync
    assert h.sync_while_idle_s == pytest.approx(2e-6)  # 2020..2022
    assert h.sync_idle_gaps_s == pytest.approx(10e-6)  # 2020..2030, drained in the sync
    assert step.bound is Bound.COMPUTE
    assert "synchronization" not in {f.kind for f in step.findings}


def test_a_sync_waiting_on_the_previous_steps_kernel_finds_the_device_busy(
    tmp_path: Path,
) -> None:
    # Step 1 (0..100) launches a kernel that runs 20..180; step 2 (100..200) waits for
    # it in cudaStreamSynchronize (105..180), then runs a kernel at 186..190.
    t = KinetoTrace()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    t.launch(10, 20, 160)
    t.runtime("cudaStreamSynchronize", 105, 75)
    t.launch(180, 186, 4)
    _, step2 = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    h = step2.host
    assert h.sync_s == pytest.approx(75e-6)
    assert h.sync_while_idle_s == 0.0  # the device ran step 1's kernel all along
    # It drained at 180, inside the sync, and idled until 186.
    assert h.sync_idle_gaps_s == pytest.approx(6e-6)
    assert h.sync_lost_s == pytest.approx(6e-6)
    assert step2.bound is not Bound.SYNCHRONIZATION


def test_equal_durations_name_no_one_last(tmp_path: Path) -> None:
    for rank in (0, 1):
        t = KinetoTrace(rank=rank, world_size=2)
        t.step(1, 0, 1000)
        t.launch(0, 10, 500 if rank == 0 else 10, name=ALL_REDUCE)  # rank 1 arrives last
        for k in range(3):  # the same 5 µs on both ranks
            t.launch(600 + 10 * k, 600 + 10 * k, 5, name=BROADCAST)
        t.write(tmp_path / f"rank{rank}.json")
    (step,) = analyse_traces(load_traces([tmp_path])).skew
    assert step.last_arrivals == {0: 0, 1: 1}
    assert step.collective_wait_s == pytest.approx({0: 490e-6, 1: 0.0})


def two_ranks(tmp_path: Path, clock_offset_us: float = 0.0) -> TraceAnalysis:
    """Two ranks, two steps of two all-reduces each. A collective ends on both ranks 50
    µs after the later rank arrives, so the earlier one waits for the difference.

    Step 1: rank 0 arrives at 300 and 500, rank 1 at 400 and 520 (rank 0 waits 100
    and 20). Step 2: rank 0 at 1400 and 1500, rank 1 at 1350 and 1520 (rank 1 waits
    50, rank 0 20). Rank 1 also broadcasts once in step 1, which rank 0 does not."""
    arrivals = {0: [(300, 500), (1400, 1500)], 1: [(400, 520), (1350, 1520)]}
    for rank in (0, 1):
        offset = clock_offset_us * rank  # the ranks' clocks need not agree
        t = KinetoTrace(rank=rank, world_size=2)
        for step, (first, second) in enumerate(arrivals[rank], start=1):
            begin = 1000 * (step - 1)
            t.step(step, begin + offset, 1000)
            t.launch(begin + 5 + offset, begin + 10 + offset, first - begin - 10)
            for k, arrival in enumerate((first, second)):
                end = max(arrivals[r][step - 1][k] for r in (0, 1)) + 50
                t.launch(arrival - 5 + offset, arrival + offset, end - arrival, name=ALL_REDUCE)
        if rank == 1:
            t.launch(600 + offset, 605 + offset, 30, name=BROADCAST)
        t.write(tmp_path / f"rank{rank}.json")
    return analyse_traces(load_traces([tmp_path]))


def test_collectives_are_matched_across_ranks_by_order(tmp_path: Path) -> None:
    analysis = two_ranks(tmp_path)
    step1, step2 = analysis.skew
    assert step1.collective_wait_s == pytest.approx({0: 120e-6, 1: 0.0})
    assert step1.last_arrivals == {0: 0, 1: 2}
    assert step2.collective_wait_s == pytest.approx({0: 20e-6, 1: 50e-6})
    assert step2.last_arrivals == {0: 1, 1: 1}
    all_reduce, broadcast = analysis.collectives
    assert all_reduce.name == ALL_REDUCE
    assert (all_reduce.matched, all_reduce.unmatched) == (4, 0)
    assert all_reduce.spread_s == pytest.approx(190e-6)  # 100 + 20 + 50 + 20
    assert all_reduce.max_spread_s == pytest.approx(100e-6)
    assert all_reduce.mean_spread_s == pytest.approx(47.5e-6)
    assert all_reduce.wait_s == pytest.approx({0: 140e-6, 1: 50e-6})
    assert all_reduce.last_arrivals == {0: 1, 1: 3}
    assert (broadcast.name, broadcast.matched, broadcast.unmatched) == (BROADCAST, 0, 1)
    # Step 1's 120 µs wait is 12% of its 1 ms step; step 2's 50 µs is under 10%.
    (finding,) = [f for f in analysis.findings if f.kind == "collective-wait"]
    assert finding.evidence["step"] == 1
    assert finding.evidence["waiting_rank"] == 0
    assert finding.evidence["most_often_last_rank"] == 1
    assert finding.evidence["max_speedup"] == pytest.approx(1 / (1 - 0.12))
    assert "rank 0 waits 0.12 ms" in finding.message and "rank 1 ×2" in finding.message


def test_matching_needs_no_common_clock(tmp_path: Path) -> None:
    (tmp_path / "same").mkdir()
    (tmp_path / "shifted").mkdir()
    same = two_ranks(tmp_path / "same")
    shifted = two_ranks(tmp_path / "shifted", clock_offset_us=5e6)
    assert [c.wait_s for c in shifted.collectives] == [c.wait_s for c in same.collectives]
    assert [s.collective_wait_s for s in shifted.skew] == [s.collective_wait_s for s in same.skew]


def test_collectives_in_the_json_document(tmp_path: Path) -> None:
    doc = render(trace_document(two_ranks(tmp_path)))
    step1 = doc["skew"][0]
    assert step1["collective_wait_s"] == pytest.approx({"0": 120e-6, "1": 0.0})
    assert step1["last_arrivals"] == {"0": 0, "1": 2}
    (first, _broadcast) = doc["collectives"]
    assert first["name"] == ALL_REDUCE
    assert first["wait_s"] == pytest.approx({"0": 140e-6, "1": 50e-6})
    assert doc["notes"] == []


def test_ranks_of_different_world_sizes_are_said_to_be(tmp_path: Path) -> None:
    for rank, world in ((0, 2), (1, 8)):
        t = KinetoTrace(rank=rank, world_size=world)
        t.step(1, 0, 100)
        t.launch(0, 10, 50, name=ALL_REDUCE)
        t.write(tmp_path / f"rank{rank}.json")
    assert analyse_traces(load_traces([tmp_path])).notes == [
        "the traces record different world sizes (2, 8): are they from one run?"
    ]


def test_an_item_that_calls_nothing_is_no_sync(tmp_path: Path) -> None:
    # An optimizer reading its CPU step counts: `aten::item` that makes no runtime call
    # waits for no device (an H200 trace of GPT-2 counted 150 such "syncs" a step). One
    # real item (t=100) copies and waits; one at t=300 overlaps a launch on another
    # thread (the autograd engine's), which is not its own.
    t = KinetoTrace()
    t.step(1, 0, 600)
    t.launch(0, 10, 400)
    t.cpu_op("aten::item", 50, 2)
    t.cpu_op("aten::item", 100, 320)
    t.copy_to_host(101, 410, 2)
    t.runtime("cudaStreamSynchronize", 110, 305)
    t.cpu_op("aten::item", 300, 3)
    t.launch(300, 450, 10)
    t.events[-2]["tid"] = 2  # the launch's runtime call, on another host thread
    (step,) = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    h = step.host
    assert h.syncs == 1
    assert h.sync_s == pytest.approx(320e-6)
    assert h.sync_calls == {"aten::item": 1, "cudaStreamSynchronize": 1}
    # Without any runtime call in the trace, nothing tells them apart: all three count
    # where it names a GPU (its CUDA activity not recorded), none where it names none.
    for device, syncs in (("NVIDIA H100 80GB HBM3", 3), (None, 0)):
        host_only = KinetoTrace(device_name=device)
        host_only.step(1, 0, 600)
        for at in (50, 100, 300):
            host_only.cpu_op("aten::item", at, 2)
        (step,) = analyse_rank(load_trace(host_only.write(tmp_path / "c.json"))).steps
        assert step.host.syncs == syncs
