"""The report a training callback writes (`integrations.ProfiledRun`, what the
Hugging Face, Lightning and accelerate adapters all wrap) opens in a browser: every
chart drawn, no console error, no request leaving the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from browser import chromium_browser, open_report  # noqa: F401 (the `chromium` fixture)

from lightspeed.integrations import ProfiledRun

pytestmark = pytest.mark.slow


def test_a_callback_s_report_opens_drawn(chromium: Any, tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with ProfiledRun(tmp_path / "ls", wait=1, warmup=1, active=3) as run:
        for _ in range(6):
            x, y = torch.randn(16, 32), torch.randint(0, 2, (16,))
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            run.step()
    with open_report(chromium, run.html_path) as page:
        assert page.console_errors == [] and page.outside_requests == []
        assert page.chart_ids()  # the trace page's charts, each drawn (or open_report fails)
