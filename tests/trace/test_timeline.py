"""The timeline of one step (`trace.timeline`): which step, its lanes and events on small
real traces, exactly where the trace is small enough to follow by hand, and the
downsampling's promises (inside the window, no overlap on a lane, nothing lost, a cap,
the same result twice) on every small trace and on synthetic ones."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from trace_paths import trace

from lightspeed.report.trace_report import trace_data
from lightspeed.trace import intervals
from lightspeed.trace.analysis import analyse_rank, analyse_traces
from lightspeed.trace.columns import build_part, merge_parts
from lightspeed.trace.events import US, Kind, Trace
from lightspeed.trace.load import load_trace
from lightspeed.trace.names import short_kernel_name
from lightspeed.trace.steps import DEVICE_KINDS, StepWindow, top_level
from lightspeed.trace.timeline import (
    MAX_EVENTS,
    Category,
    Lane,
    Timeline,
    common_step,
    representative_step,
)

SMALL_TRACES = (
    "hta-a100-alexnet-benchmark",
    "hta-a100-cuda-event-sync",
    "hta-a100-ddp-train-rank0of2",
    "hta-cpu-only-rank34",
    "hta-mi250-minitoy-train",
    "hta-mtia-inference-rank0",
    "hta-recsys-128ranks-sampled-rank0",
    "hta-v100-ddp-cnn-train-rank0",
    "tracelens-h100-bert-small-inference",
)
_COMMUNICATION = re.compile(r"^nccl.*Kernel")


def timeline_of(t: Trace) -> Timeline:
    timeline = analyse_rank(t).timeline
    assert timeline is not None
    return timeline


def synthetic(events: list[dict[str, Any]]) -> Trace:
    """A trace of complete events, read as a file's would be."""
    return merge_parts([build_part(events)], "synthetic", {})


def cpu_op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_the_middle_step_of_median_length_is_shown() -> None:
    def windows(*lengths: float) -> list[StepWindow]:
        return [
            StepWindow(number=i, start_us=100.0 * i, end_us=100.0 * i + n)
            for i, n in enumerate(lengths)
        ]

    assert representative_step([]) is None
    assert representative_step(windows(7)) == 0
    assert representative_step(windows(90, 5)) == 0  # the last may be cut short
    # Not the first nor the last; of 50, 30, 20, 40 the lower median, 30.
    assert representative_step(windows(10, 50, 30, 20, 40, 5)) == 2
    assert representative_step(windows(10, 30, 30, 5)) == 1  # equal: the earlier
    # Steps 102, 103, 104 last 72078, 95697, 95551 µs: the median is 104's.
    assert timeline_of(load_trace(trace("hta-v100-ddp-cnn-train-rank0"))).step == 104
    assert timeline_of(load_trace(trace("hta-mi250-minitoy-train"))).step == 1  # of 2


def test_ranks_show_one_step_side_by_side() -> None:
    def windows(first: int, *lengths: float) -> list[StepWindow]:
        return [
            StepWindow(number=first + i, start_us=100.0 * i, end_us=100.0 * i + n)
            for i, n in enumerate(lengths)
        ]

    rank0 = windows(10, 10, 50, 30, 20, 40, 5)  # steps 10..15
    rank1 = windows(11, 9, 50, 10, 25, 7)  # steps 11..15
    # Alone, rank 1 shows step 14: of its middle steps 12..14 (50, 10, 25 µs) the median.
    assert rank1[representative_step(rank1) or 0].number == 14
    # Together both show rank 0's choice among the shared steps 11..15 (50, 30, 20, 40,
    # 5 µs): of the middle ones 30, 20, 40, the median, 30: step 12.
    assert common_step([rank0, rank1]) == 12
    assert common_step([rank0, windows(40, 10, 10, 10)]) is None  # no step in common
    assert common_step([[]]) is None


def test_a_chosen_step_is_every_ranks_timeline() -> None:
    two = [trace("hta-recsys-128ranks-sampled-rank0"), trace("hta-recsys-128ranks-sampled-rank1")]
    default = analyse_traces([load_trace(p) for p in two])
    assert {r.timeline.step for r in default.ranks if r.timeline} == {551}
    chosen = analyse_traces([load_trace(p) for p in two], timeline_step=552)
    assert [r.timeline.step for r in chosen.ranks if r.timeline] == [552, 552]


def test_cuda_event_sync_step_exact() -> None:
    t = timeline_of(load_trace(trace("hta-a100-cuda-event-sync")))
    # ProfilerStep#100 runs 1707417525509335 µs + 3154; its device events lie inside.
    assert t.step == 100
    assert t.start_s == pytest.approx(1707417525.509335, abs=1e-7)
    assert t.duration_s == 3154e-6
    assert t.lanes == (Lane("thread 948300", "host"), Lane("GPU 0 stream 7", "device"))
    events = [
        (
            int(lane),
            round(start / US, 3),
            round(dur / US, 3),
            short_kernel_name(name),
            category.value,
        )
        for lane, start, dur, name, category in zip(
            t.lane, t.event_start_s, t.event_duration_s, t.name, t.category, strict=True
        )
    ]
    assert events == [
        (0, 570.0, 2245.0, "aten::ones", "cpu-op"),
        (0, 2824.0, 39.0, "aten::sum", "cpu-op"),
        (0, 2870.0, 33.0, "aten::gt", "cpu-op"),
        # is_nonzero (2910 + 47) calls item (2912 + 45): the sync cuts it to 2 µs.
        (0, 2910.0, 2.0, "aten::is_nonzero", "cpu-op"),
        (0, 2912.0, 45.0, "aten::item", "sync"),
        (0, 3047.0, 34.0, "cudaEventSynchronize", "sync"),
        (0, 3139.0, 8.0, "cudaDeviceSynchronize", "sync"),
        # Short (1 µs < 3154 / 2000) but with longer events between: not merged.
        (1, 2810.0, 1.0, "at::native::vectorized_elementwise_kernel", "kernel"),
        (1, 2859.0, 11.0, "at::native::reduce_kernel", "kernel"),
        (1, 2900.0, 1.0, "at::native::vectorized_elementwise_kernel", "kernel"),
        (1, 2935.0, 2.0, "Memcpy DtoH", "memory"),  # (Device -> Pageable)
        (1, 3037.0, 36.0, "at::cuda::spin_kernel", "kernel"),  # (anonymous namespace)::spin_kernel
    ]
    # 4 top-level ops, 3 outermost syncs (item's own copy and stream sync lie inside it),
    # 5 device events.
    assert (t.events_in_window, t.events_kept) == (12, 12)


def test_ddp_lanes_and_collectives() -> None:
    t = timeline_of(load_trace(trace("hta-a100-ddp-train-rank0of2")))
    assert t.step == 5  # of 4, 5, 6
    assert [lane.name for lane in t.lanes] == [
        "thread 2910249",
        "thread 2919752",
        "GPU 0 stream 7",
        "GPU 0 stream 40",
    ]
    assert [lane.kind for lane in t.lanes] == ["host", "host", "device", "device"]
    device_collectives = {
        name
        for lane, name, category in zip(t.lane, t.name, t.category, strict=True)
        if t.lanes[lane].kind == "device" and category is Category.COLLECTIVE
    }
    assert device_collectives == {
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    }
    for lane, name, category in zip(t.lane, t.name, t.category, strict=True):
        if t.lanes[lane].kind == "device" and category is not Category.MERGED:
            assert (category is Category.COLLECTIVE) == bool(_COMMUNICATION.match(name))


def test_cpu_only_trace_has_host_lanes_only() -> None:
    t = timeline_of(load_trace(trace("hta-cpu-only-rank34")))
    # Step 551 holds no CPU op: the host's work is two gloo all-reduces (annotations).
    assert t.step == 551
    assert t.lanes == (Lane("thread 3553", "host"), Lane("thread 3554", "host"))
    assert t.name == ("gloo:all_reduce", "gloo:all_reduce")
    assert t.category == (Category.COLLECTIVE, Category.COLLECTIVE)
    # 1212075548353.304 − 1212075529876.817 µs; 1212075556659.473 − the same.
    assert t.event_start_s.tolist() == [0.018476487, 0.026782656]
    assert t.event_duration_s.tolist() == [0.173209713, 0.170471258]


@pytest.mark.parametrize("name", SMALL_TRACES)
def test_kept_events_lie_in_the_window_apart_and_cover_the_lanes(name: str) -> None:
    source = load_trace(trace(name))
    t = timeline_of(source)
    ends = t.event_start_s + t.event_duration_s
    assert np.all(t.event_start_s >= 0) and np.all(ends <= t.duration_s + 1e-12)
    assert np.all(t.event_duration_s >= 0)
    for lane in range(len(t.lanes)):
        on = t.lane == lane
        starts, lane_ends = t.event_start_s[on], ends[on]
        assert np.all(starts[1:] >= lane_ends[:-1] - 1e-12), "events overlap on a lane"
        kept_s = float(t.event_duration_s[on].sum())
        # Rounding each block to the ns may lose up to 1 ns per block.
        assert kept_s >= _original_s(source, t, t.lanes[lane]) - 1e-9 * (on.sum() + 1)
    for event_name, category in zip(t.name, t.category, strict=True):
        merged = re.fullmatch(r"(\d+) events", event_name)
        many = merged is not None and int(merged[1]) >= 2
        assert (category is Category.MERGED) == (many and category is not Category.COLLECTIVE)
    assert t.events_kept == len(t.lane) == len(t.name) == len(t.category)


def _original_s(source: Trace, t: Timeline, lane: Lane) -> float:
    """The time the lane's top-level CPU ops (or device events) fill in the window, s."""
    lo, hi = t.start_s / US, (t.start_s + t.duration_s) / US
    if lane.kind == "host":
        ops = source.table(Kind.CPU_OP)
        mine = top_level(ops) & (ops.tid == int(lane.name.split()[-1]))
        starts, ends = ops.ts_us[mine], ops.end_us[mine]
    else:
        device_id, stream = map(int, re.findall(r"-?\d+", lane.name))
        tables = [source.table(k) for k in DEVICE_KINDS]
        mine = [(e.pid == device_id) & (e.tid == stream) for e in tables]
        starts = np.concatenate([e.ts_us[m] for e, m in zip(tables, mine, strict=True)])
        ends = np.concatenate([e.end_us[m] for e, m in zip(tables, mine, strict=True)])
    return intervals.length(*intervals.clip(starts, ends, lo, hi)) * US


def test_runs_of_short_events_merge_unless_a_long_one_or_gap_lies_between() -> None:
    # 20000 µs of one thread: merging below 20000 / 2000 = 10 µs.
    shorts = [cpu_op("tiny", 5000 + 2 * i, 2) for i in range(10)]
    t = timeline_of(
        synthetic(
            [
                cpu_op("A", 0, 5000),
                *shorts,  # 5000 → 5020
                cpu_op("B", 5020, 4980),
                *[cpu_op("tiny", 10000 + 2 * i, 2) for i in range(3)],  # 10000 → 10006
                # 50 µs apart from the last: a gap of 10 µs or more splits a run.
                cpu_op("tiny", 10056, 2),
                cpu_op("tiny", 10058, 2),
                cpu_op("lone", 10070, 2),
                cpu_op("C", 10080, 9920),
            ]
        )
    )
    assert t.step is None and t.duration_s == 0.02
    assert t.name == ("A", "10 events", "B", "3 events", "2 events", "lone", "C")
    assert [round(s / US) for s in t.event_start_s] == [0, 5000, 5020, 10000, 10056, 10070, 10080]
    assert [round(d / US) for d in t.event_duration_s] == [5000, 20, 4980, 6, 4, 2, 9920]
    assert t.category.count(Category.MERGED) == 3
    assert (t.events_in_window, t.events_kept) == (19, 7)


def test_a_profiler_step_recorded_as_an_op_is_not_drawn() -> None:
    t = timeline_of(synthetic([cpu_op("ProfilerStep#3", 0, 1000), cpu_op("aten::mm", 10, 500)]))
    assert t.name == ("aten::mm",)


def test_the_cap_keeps_the_longest_events() -> None:
    # 25 threads of 1000 back-to-back ops; thread k's last 100 + k µs. The window is
    # 1000 × 124 µs, so none is short (< 62 µs); the 20000 longest are threads 5 … 24's.
    events = [cpu_op("op", i * (100 + k), 100 + k, tid=k) for k in range(25) for i in range(1000)]
    t = timeline_of(synthetic(events))
    assert (t.events_in_window, t.events_kept) == (25_000, MAX_EVENTS)
    kept_lanes = {t.lanes[lane].name for lane in t.lane}
    assert kept_lanes == {f"thread {k}" for k in range(5, 25)}
    assert np.all(np.bincount(t.lane)[5:] == 1000)


def test_the_same_trace_gives_the_same_timeline() -> None:
    path = trace("hta-v100-ddp-cnn-train-rank0")
    first, second = (trace_data(analyse_traces([load_trace(path)])) for _ in range(2))
    timeline = first["ranks"][0]["timeline"]
    assert timeline == second["ranks"][0]["timeline"]
    keys = ("step", "start_s", "duration_s", "lanes", "events", "events_in_window", "events_kept")
    assert set(timeline) == set(keys)
    assert set(timeline["events"]) == {"lane", "start_s", "duration_s", "name", "category"}
    assert len(timeline["events"]["name"]) == timeline["events_kept"]


def test_no_events_no_timeline() -> None:
    assert analyse_rank(synthetic([])).timeline is None
