"""Device idle time attributed to what the host was doing, on a small trace whose
figures follow by hand from its timeline (µs), and on a real recsys trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto import KinetoTrace
from trace_paths import SHARED_TRACES

from lightspeed.trace import analyse_rank, load_trace
from lightspeed.trace.idle_causes import IDLE_CAUSES


def test_each_idle_stretch_goes_to_the_first_host_activity_covering_it(tmp_path: Path) -> None:
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.launch(0, 100, 100)  # device busy 100–200
    t.runtime("cudaStreamSynchronize", 150, 150)  # idle 200–300: in a sync
    t.cpu_op("aten::copy_", 250, 200)  # a CPU op under the sync, and on alone 300–400
    t.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 400, 100)
    t.cpu_op("gloo:all_reduce", 500, 100)  # idle 500–600: in a collective
    t.launch(600, 700, 100)  # launching 600–605; nothing 605–700; busy 700–800
    # 800–1000: the step runs on with no device work and no host event.
    (step,) = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    c = step[IDLE_CAUSES]
    # Idle: 0–100, 200–700, 800–1000 = 100 + 500 + 200 = 800 µs of the 1000 µs step.
    assert c.idle_s == pytest.approx(800e-6)
    assert c.in_sync_s == pytest.approx(100e-6)  # 200–300
    assert c.in_cpu_ops_s == pytest.approx(100e-6)  # 300–400 (aten::copy_ alone)
    assert c.loading_data_s == pytest.approx(100e-6)  # 400–500
    assert c.in_collectives_s == pytest.approx(100e-6)  # 500–600
    # 0–5 and 600–605: the two launches, while the device idles.
    assert c.launching_s == pytest.approx(10e-6)
    # 5–100, 605–700 and 800–1000.
    assert c.unrecorded_s == pytest.approx((95 + 95 + 200) * 1e-6)
    parts = c.in_sync_s + c.loading_data_s + c.in_collectives_s + c.launching_s
    assert parts + c.in_cpu_ops_s + c.unrecorded_s == pytest.approx(c.idle_s)


@pytest.mark.skipif(
    not SHARED_TRACES.is_dir(), reason="LIGHTSPEED_SHARED_TRACES names no directory"
)
def test_the_recsys_idle_time_is_attributed() -> None:
    """The recsys trace's whole-trace idle (69 % of its device span) is mostly the host
    blocked in cudaMemcpyAsync calls (to or from pageable memory), not unexplained."""
    rank = analyse_rank(load_trace(SHARED_TRACES / "hta-a100-80gb-recsys-train-rank0of16.json.gz"))
    c = rank.whole[IDLE_CAUSES]
    assert c.idle_s == pytest.approx(rank.whole.temporal.idle_s)
    assert c.in_copy_calls_s / c.idle_s > 0.5
    assert c.in_copy_calls_s > c.launching_s
    assert c.unrecorded_s / c.idle_s < 0.1
