"""`ProfiledRun` around a plain loop: the size limit on its trace, and MFU against a
peak the user gives."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from lightspeed.errors import LightspeedError
from lightspeed.integrations import ProfiledRun


def _train(run: ProfiledRun, steps: int = 6) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 32), torch.randint(0, 4, (8,))
    with run:
        for _ in range(steps):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            run.step()


def test_a_trace_over_the_limit_keeps_its_first_steps_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = ProfiledRun(tmp_path, wait=1, warmup=1, active=3, max_trace_mb=0.000001)
    with caplog.at_level(logging.WARNING, logger="lightspeed.integrations.run"):
        _train(run)
    assert "keeps its first 1 of 3 recorded steps" in caplog.text
    assert run.metrics is not None and run.metrics["lightspeed/steps_recorded"] == 1
    (rank,) = json.loads((tmp_path / "lightspeed.json").read_text())["ranks"]
    assert [s["step"] for s in rank["steps"]] == [2]


def test_mfu_against_a_peak_the_user_gives(tmp_path: Path) -> None:
    run = ProfiledRun(tmp_path, wait=1, warmup=1, active=3, peak_flops=1e12)
    _train(run)
    m = run.metrics
    assert m is not None
    # Forward 2·8·(32·64 + 64·4); backward the weights' gradients and the hidden input's.
    forward = 2 * 8 * (32 * 64 + 64 * 4)
    assert m["lightspeed/flops_per_step"] == forward + 2 * 8 * (32 * 64 + 64 * 4) + 2 * 8 * 64 * 4
    rate = m["lightspeed/flops_per_s"]
    assert isinstance(rate, float) and rate > 0
    assert m["lightspeed/mfu"] == rate / 1e12
    with pytest.raises(LightspeedError, match="peak_flops must be a positive"):
        ProfiledRun(tmp_path, peak_flops=0)
    with pytest.raises(LightspeedError, match="max_trace_mb must be a positive"):
        ProfiledRun(tmp_path, max_trace_mb=-1)
