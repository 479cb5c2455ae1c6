"""`lightspeed.integrations.transformers.LightspeedCallback` in a real `Trainer.train`:
a tiny BERT on the CPU, gradient accumulation 2."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from lightspeed.integrations.transformers import LightspeedCallback  # noqa: E402


class _Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return {
            "input_ids": torch.randint(0, 128, (16,), generator=g),
            "labels": torch.tensor(i % 2),
        }


def _train(
    tmp_path: Path,
    callback: LightspeedCallback,
    max_steps: int,
    report_to: list[str] | None = None,
    attach: bool = False,
) -> Any:
    """A tiny BERT trained `max_steps` optimizer steps with `callback` (with `attach`:
    added first by `LightspeedCallback.attach`, ahead of the `report_to` integrations)."""
    config = transformers.BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=2,
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=max_steps,
        logging_steps=2,
        report_to=report_to or [],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=_Tokens(),
        callbacks=[] if attach else [callback],
    )
    if attach:
        callback.attach(trainer)
    trainer.train()
    return trainer


def test_the_callback_records_optimizer_steps_and_logs_the_report_s_figures(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ls"
    callback = LightspeedCallback(out, wait=1, warmup=1, active=3, log="tensorboard")
    trainer = _train(tmp_path, callback, max_steps=6)
    (trace,) = (out / "traces").glob("*.pt.trace.json.gz")
    assert b'"Input Dims"' in gzip.decompress(trace.read_bytes())  # shapes recorded
    doc = json.loads((out / "lightspeed.json").read_text())
    (rank,) = doc["ranks"]
    # One ProfilerStep an optimizer step (two micro-batches each), the active ones only.
    assert [s["step"] for s in rank["steps"]] == [2, 3, 4]
    assert (out / "lightspeed.html").read_text().lstrip().lower().startswith("<!doctype html")
    (logged,) = [h for h in trainer.state.log_history if "lightspeed/step_time_s" in h]
    times = [s["step_s"] for s in rank["steps"]]
    assert logged["lightspeed/step_time_s"] == statistics.median(times)
    assert logged["lightspeed/steps_recorded"] == 3
    assert (
        logged["lightspeed/bound"]
        == Counter(s["bound"] for s in rank["steps"]).most_common(1)[0][0]
    )
    assert logged["step"] == 5  # logged when the last active step ended
    # Two batches of 4 an optimizer step, over the recorded steps' time.
    assert logged["lightspeed/batches_per_s"] == pytest.approx(6 / sum(times), rel=1e-12)
    assert logged["lightspeed/samples_per_s"] == pytest.approx(24 / sum(times), rel=1e-12)
    # The same figures in TensorBoard, at the optimizer steps the run had taken.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard" / "ls"))
    events.Reload()
    scalar = events.Scalars("lightspeed/step_time_s")[0]
    assert (scalar.step, scalar.value) == (5, pytest.approx(logged["lightspeed/step_time_s"]))


def test_a_run_shorter_than_the_schedule_trains_on_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "ls"
    trainer = _train(tmp_path, LightspeedCallback(out, wait=1, warmup=1, active=3), max_steps=2)
    assert trainer.state.global_step == 2
    assert "nothing analysed" in caplog.text
    assert not (out / "lightspeed.json").exists()
    assert not list((out / "traces").glob("*.json.gz"))  # the warm-up it stopped in
    assert not any(k.startswith("lightspeed/") for h in trainer.state.log_history for k in h)


def test_attached_first_its_figures_reach_the_trainer_s_report_to(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    callback = LightspeedCallback(tmp_path / "ls", wait=1, warmup=1, active=3)
    trainer = _train(tmp_path, callback, max_steps=6, report_to=["tensorboard"], attach=True)
    assert trainer.callback_handler.callbacks[0] is callback
    assert callback.run is not None and callback.run.metrics is not None
    (run,) = (tmp_path / "trainer" / "runs").iterdir()
    events = EventAccumulator(str(run))
    events.Reload()
    # The trainer's TensorBoard integration names them train/…, at the step they were
    # taken (the fifth: the last recorded), beside its own loss.
    logged = {
        k.removeprefix("train/"): events.Scalars(k)[0]
        for k in events.Tags()["scalars"]
        if k.startswith("train/lightspeed/")
    }
    numbers = {k: v for k, v in callback.run.metrics.items() if not isinstance(v, str)}
    assert {k: e.value for k, e in logged.items()} == pytest.approx(numbers, rel=1e-6)
    assert {e.step for e in logged.values()} == {5}
