"""`lightspeed.observe()` on CPU training loops built to be bound by one thing each."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
import torch

import lightspeed
from lightspeed.errors import ConfigError
from lightspeed.rules import Bound


class SlowDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample takes 3 ms to "decode": a batch of 8 waits 24 ms for data."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.003)
        return torch.randn(32), torch.randn(1)


def test_a_slow_dataset_is_data_loading_bound(tmp_path: Path) -> None:
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=8)
    with lightspeed.observe(trace_dir=tmp_path) as obs:
        for x, y in obs.loop(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert obs.bound is Bound.DATA_LOADING
    assert obs.steps_taken == 5  # wait 1 + warm-up 1 + active 3, then the loop stops
    (step, *_) = obs.rank.steps
    assert step.host.data_loading_s > 0.5 * step.host.window_s
    assert obs.findings[0].kind == "data-loading"
    assert step.host.loader_workers is False and "num_workers > 0" in obs.findings[0].message
    # The trace is a gzipped Chrome trace, named as TensorBoard's profiler expects.
    assert obs.trace_path is not None and obs.trace_path.parent == tmp_path
    assert obs.trace_path.name.endswith(".pt.trace.json.gz")
    events = json.loads(gzip.decompress(obs.trace_path.read_bytes()))["traceEvents"]
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in events)


def test_an_item_on_the_cpu_waits_for_nothing() -> None:
    # On a CPU `.item()` reads a value already computed: no device to wait for, so no
    # sync, and 200 top-level ops (mul, tanh, sum, item) a step are overhead.
    x = torch.randn(64)
    with lightspeed.observe() as obs:
        for _ in range(5):
            total = 0.0
            for _ in range(50):
                x = torch.tanh(x * 1.0001)
                total += x.sum().item()
            obs.step()
    assert obs.bound is not Bound.SYNCHRONIZATION
    assert [w.host.syncs for w in obs.rank.steps] == [0, 0, 0]


def test_many_tiny_ops_are_overhead_bound() -> None:
    x = torch.randn(8)
    with lightspeed.observe() as obs:
        for _ in range(5):
            for _ in range(300):
                x = x * 1.0001 + 0.0001
            obs.step()
    assert obs.bound is Bound.OVERHEAD
    assert all(w.host.overhead_s > 0.5 * w.host.window_s for w in obs.rank.steps)


def test_large_matmuls_are_cpu_compute_bound() -> None:
    a = torch.randn(384, 384)
    with lightspeed.observe() as obs:
        for _ in range(5):
            for _ in range(3):
                a = torch.tanh(a @ a * 0.001)
            obs.step()
    assert obs.bound is Bound.COMPUTE


def test_a_loop_shorter_than_the_schedule_says_so() -> None:
    # One step ends inside the warm-up: nothing is recorded before the block ends.
    expected = r"saw 1 step\(s\), but its schedule records steps 3–5"
    with pytest.raises(ConfigError, match=expected), lightspeed.observe() as obs:
        obs.step()


def test_the_schedule_is_checked() -> None:
    with pytest.raises(ConfigError, match="active must be at least 1"):
        lightspeed.observe(active=0)


def test_the_loop_stops_after_the_schedule_unless_told_to_go_on() -> None:
    x = torch.randn(16)
    with lightspeed.observe(wait=0, warmup=1, active=2) as obs:
        ran = sum(1 for _ in obs.loop(range(10)) if (x := x * 2 + 1) is not None)
    assert ran == 3 and len(obs.rank.steps) == 2
    with lightspeed.observe(wait=0, warmup=1, active=2) as obs:
        ran = sum(1 for _ in obs.loop(range(10), stop_when_recorded=False))
    assert ran == 10 and obs.steps_taken == 10 and len(obs.rank.steps) == 2


def test_workers_that_do_not_keep_up_get_the_next_knobs() -> None:
    model = torch.nn.Linear(32, 1)
    # Two workers, each 24 ms a batch of 8: still 12 ms of loading for a step of well
    # under a millisecond, once the batches queued ahead run out. The queue holds one
    # batch a worker and the two deliver in pairs: of eight recorded steps at least three
    # wait about 24 ms, whatever filled the queue before (a slow profiler start does).
    loader = torch.utils.data.DataLoader(
        SlowDataset(), batch_size=8, num_workers=2, prefetch_factor=1
    )
    with lightspeed.observe(active=8) as obs:
        for x, y in obs.loop(loader):
            torch.nn.functional.mse_loss(model(x), y).backward()
    assert obs.bound is Bound.DATA_LOADING
    assert all(w.host.loader_workers for w in obs.rank.steps)
    message = obs.findings[0].message
    assert "worker processes do not keep up: raise num_workers" in message
    assert "num_workers > 0" not in message
