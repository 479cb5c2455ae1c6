"""`ProfiledRun` around a hand-written accelerate loop, stepped where accelerate syncs
the gradients (gradient accumulation 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

accelerate = pytest.importorskip("accelerate")

from lightspeed.integrations import ProfiledRun  # noqa: E402


def test_a_hand_written_accelerate_loop_records_its_optimizer_steps(tmp_path: Path) -> None:
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Linear(16, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    out = tmp_path / "ls"
    with ProfiledRun(out, wait=1, warmup=1, active=3, report=accelerator.is_main_process) as run:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                run.step()
    assert run.finished and run.metrics is not None
    (rank,) = json.loads((out / "lightspeed.json").read_text())["ranks"]
    assert [s["step"] for s in rank["steps"]] == [2, 3, 4]
    assert run.metrics["lightspeed/steps_recorded"] == 3
