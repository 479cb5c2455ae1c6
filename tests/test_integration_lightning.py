"""`lightspeed.integrations.lightning` in a real `Trainer.fit`: a tiny model on the CPU,
gradient accumulation 2, with the callback and with the profiler."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.multiprocessing.spawn import ProcessExitedException

pl = pytest.importorskip("lightning.pytorch")

from lightspeed.integrations.lightning import (  # noqa: E402
    LightspeedCallback,
    LightspeedProfiler,
)


class _Tiny(pl.LightningModule):  # type: ignore[misc]
    def __init__(self, width: int = 0) -> None:
        super().__init__()
        # `width`: hidden layers that make a step long enough to time (milliseconds).
        hidden = [torch.nn.Linear(width or 16, width or 16) for _ in range(3 if width else 0)]
        self.layer = torch.nn.Sequential(
            torch.nn.Linear(16, width or 16), *hidden, torch.nn.Linear(width or 16, 2)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(
    max_steps: int, devices: int = 1, width: int = 0, flops: bool = False, **trainer_args: Any
) -> Any:
    """`flops`: the module carries `flops_per_batch`, Lightning's own count (for its
    ThroughputMonitor) of a batch's forward and backward."""
    data = torch.utils.data.TensorDataset(torch.randn(96, 16), torch.randint(0, 2, (96,)))
    trainer = pl.Trainer(
        max_steps=max_steps,
        accumulate_grad_batches=2,
        accelerator="cpu",
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        devices=devices,
        **trainer_args,
    )
    module = _Tiny(width)
    if flops:
        from lightning.fabric.utilities.throughput import measure_flops

        with torch.device("meta"):
            meta, x = _Tiny(width), torch.randn(4, 16)
        y = torch.zeros(4, dtype=torch.long, device="meta")
        module.flops_per_batch = measure_flops(
            meta, lambda: meta.training_step((x, y), 0), loss_fn=lambda loss: loss
        )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4))
    return trainer


def _steps(out: Path) -> list[dict[str, Any]]:
    (trace,) = (out / "traces").glob("*.pt.trace.json.gz")
    assert trace.stat().st_size > 0
    assert (out / "lightspeed.html").exists()
    (rank,) = json.loads((out / "lightspeed.json").read_text())["ranks"]
    steps: list[dict[str, Any]] = rank["steps"]
    return steps


def test_the_callback_records_optimizer_steps_and_logs_to_the_trainer_s_loggers(
    tmp_path: Path,
) -> None:
    from lightning.pytorch.loggers import CSVLogger

    out = tmp_path / "ls"
    logger = CSVLogger(tmp_path / "logs", name="run", version=0)
    _fit(6, logger=logger, callbacks=[LightspeedCallback(out, wait=1, warmup=1, active=3)])
    steps = _steps(out)
    # One ProfilerStep an optimizer step of two batches, the active ones only.
    assert [s["step"] for s in steps] == [2, 3, 4]
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        (row,) = [r for r in csv.DictReader(f) if r.get("lightspeed/step_time_s")]
    assert float(row["lightspeed/step_time_s"]) == statistics.median(s["step_s"] for s in steps)
    assert float(row["lightspeed/steps_recorded"]) == 3
    assert int(row["step"]) == 5


def test_the_throughput_agrees_with_lightning_s_own_monitor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.callbacks import ThroughputMonitor, throughput_monitor
    from lightning.pytorch.loggers import CSVLogger

    # Its table has no CPU: both take MFU against the same peak, as a user gives ours.
    peak = 1e12
    monkeypatch.setattr(throughput_monitor, "get_available_flops", lambda device, dtype: peak)

    logger = CSVLogger(tmp_path / "logs", name="run", version=0)

    # Its window: the 6 batches of the 3 recorded optimizer steps (7 batch ends), so both
    # time the same batches; it first in the list, so the trace's export at the window's
    # end is not in its last interval.
    def items(batch: Any) -> int:
        return int(batch[0].numel())  # features, as a language model's tokens

    monitor = ThroughputMonitor(
        batch_size_fn=lambda batch: len(batch[0]), length_fn=items, window_size=7
    )
    ours = LightspeedCallback(
        tmp_path / "ls", wait=1, warmup=1, active=3, length_fn=items, peak_flops=peak
    )
    _fit(6, width=512, logger=logger, log_every_n_steps=1, callbacks=[monitor, ours], flops=True)
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    (ours,) = [
        {k: float(v) for k, v in r.items() if v and k.startswith("lightspeed/")}
        for r in rows
        if r.get("lightspeed/batches_per_s")
    ]
    # Its figures over the window that ends with the last recorded batch, the 10th.
    (theirs,) = [r for r in rows if r.get("train/batches") == "10"]
    assert ours["lightspeed/samples_per_s"] == 4 * ours["lightspeed/batches_per_s"]
    assert ours["lightspeed/items_per_s"] == 16 * ours["lightspeed/samples_per_s"]
    for key in ("batches", "samples", "items", "flops"):
        assert ours[f"lightspeed/{key}_per_s"] == pytest.approx(
            float(theirs[f"train/device/{key}_per_sec"]), rel=0.05
        )
    assert ours["lightspeed/mfu"] == pytest.approx(float(theirs["train/device/mfu"]), rel=0.05)
    # Its FLOPs are torch's FlopCounterMode's on the meta device (`measure_flops`), ours
    # the trace's products by their recorded shapes: the same count, two batches a step.
    module_flops = float(theirs["train/device/flops_per_sec"]) / float(
        theirs["train/device/batches_per_sec"]
    )
    assert ours["lightspeed/flops_per_step"] == pytest.approx(2 * module_flops, rel=1e-9)


def test_the_profiler_records_the_same_steps_and_sums_them_up(tmp_path: Path) -> None:
    out = tmp_path / "ls"
    profiler = LightspeedProfiler(out, wait=1, warmup=1, active=3)
    _fit(6, logger=False, profiler=profiler)
    assert [s["step"] for s in _steps(out)] == [2, 3, 4]
    assert "lightspeed/bound" in profiler.summary()


def test_beside_a_profiler_the_user_runs_it_records_nothing_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "ls"
    with torch.profiler.profile():
        trainer = _fit(4, logger=False, callbacks=[LightspeedCallback(out)])
    assert trainer.global_step == 4
    assert "another torch.profiler is already recording" in caplog.text
    assert not (out / "lightspeed.json").exists()


def test_two_processes_write_a_trace_each_and_rank_0_reports_both(tmp_path: Path) -> None:
    def fit(out: Path) -> None:
        _fit(
            6,
            logger=False,
            strategy="ddp_spawn",
            devices=2,
            callbacks=[LightspeedCallback(out, wait=1, warmup=1, active=3)],
        )

    out = tmp_path / "ls"
    try:
        fit(out)
    except ProcessExitedException as error:
        # Now and then a spawned process aborts in gloo's teardown once training has
        # ended ("terminate called without an active exception"), taking the other
        # down with it: torch's, not the callback's. One more run, in a folder of its own.
        if error.signal_name != "SIGABRT":
            raise
        out = tmp_path / "again"
        fit(out)
    assert len(list((out / "traces").glob("*.pt.trace.json.gz"))) == 2
    doc = json.loads((out / "lightspeed.json").read_text())
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all([s["step"] for s in r["steps"]] == [2, 3, 4] for r in doc["ranks"])
    assert doc["skew"]  # the steps compared across the ranks
