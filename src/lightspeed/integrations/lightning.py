"""lightspeed in PyTorch Lightning (the `lightning` extra): a callback and a profiler.

    from lightspeed.integrations.lightning import LightspeedCallback, LightspeedProfiler

    trainer = Trainer(callbacks=[LightspeedCallback("ls")])    # figures to trainer.loggers
    trainer = Trainer(profiler=LightspeedProfiler("ls"))       # or as the trainer's profiler

Either profiles a wait/warm-up/active schedule of optimizer steps (with
`accumulate_grad_batches=2`, a step is two batches and the optimizer's update) and
analyses it as `lightspeed trace` does (`integrations.run.ProfiledRun`): the trace goes to
`OUTPUT_DIR/traces/`, the report to `OUTPUT_DIR/lightspeed.json` and `.html`. The callback
logs the numeric figures to every logger of the trainer at the step they were taken; the
profiler, which sees no logger, gives them in its `summary()`, which Lightning prints
after fit. Every rank writes its trace; global rank 0 writes the report, of every rank's
trace (the steps compared across ranks).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.profilers import Profiler

from lightspeed.integrations.run import DEFAULT_MAX_TRACE_MB, ProfiledRun, run_settings
from lightspeed.integrations.sinks import numbers


class LightspeedCallback(pl.Callback):
    """Profile optimizer steps `wait + warmup + 1` to `wait + warmup + active` of a fit,
    write the trace and the report to `output_dir`, log the figures to the trainer's
    loggers; with `log` ("wandb", "mlflow", "tensorboard") also to those sinks, with the
    report's files (`integrations.sinks`). `batch_size_fn` and `length_fn` give a batch's
    samples and items (tokens), as for Lightning's `ThroughputMonitor`: the recorded
    steps' batches, samples and items per second are logged beside the rest (by default a
    batch's samples are the first dimension of its first tensor). `peak_flops` (FLOP/s):
    the peak `mfu` is taken against, where the catalog has none (a CPU) or to match the
    one a `ThroughputMonitor` uses. `max_trace_mb`: each rank's trace cut to its first
    steps that fit (`ProfiledRun`)."""

    def __init__(
        self,
        output_dir: str | Path = "lightspeed",
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        log: str | None = None,
        peak_flops: float | None = None,
        max_trace_mb: float | None = DEFAULT_MAX_TRACE_MB,
        batch_size_fn: Callable[[Any], int | None] | None = None,
        length_fn: Callable[[Any], int] | None = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.batch_size_fn = batch_size_fn or first_dimension
        self.length_fn = length_fn
        self.settings = run_settings(wait, warmup, active, log, peak_flops, max_trace_mb)
        self.run: ProfiledRun | None = None
        self._optimizer_steps = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.run = ProfiledRun(self.output_dir, **self.settings, report=trainer.is_global_zero)
        self._optimizer_steps = trainer.global_step
        self.run.start()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.run is None or self.run.finished:
            return
        samples = self.batch_size_fn(batch)
        self.run.count(1, samples, None if self.length_fn is None else self.length_fn(batch))
        # global_step counts optimizer steps: a batch that only accumulated leaves it.
        if trainer.global_step == self._optimizer_steps:
            return
        self._optimizer_steps = trainer.global_step
        self.run.step()
        if self.run.finished:
            self._log(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.run is not None and not self.run.finished:
            self.run.finish()
            self._log(trainer)

    def _log(self, trainer: pl.Trainer) -> None:
        assert self.run is not None
        metrics = self.run.metrics
        if metrics is None:
            return
        numeric = numbers(metrics)
        for logger in trainer.loggers:
            logger.log_metrics(numeric, step=trainer.global_step)


class LightspeedProfiler(Profiler):
    """A Lightning `Profiler` for `Trainer(profiler=...)` that profiles the same schedule of
    optimizer steps as `LightspeedCallback` and reports into `output_dir` (its arguments
    are the callback's); `summary()` is the run's figures and bound."""

    def __init__(
        self,
        output_dir: str | Path = "lightspeed",
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        log: str | None = None,
        peak_flops: float | None = None,
        max_trace_mb: float | None = DEFAULT_MAX_TRACE_MB,
    ) -> None:
        super().__init__(dirpath=output_dir)
        self.output_dir = Path(output_dir)
        self.settings = run_settings(wait, warmup, active, log, peak_flops, max_trace_mb)
        self.run: ProfiledRun | None = None
        self._stepped = False  # the optimizer stepped in the batch now running

    def start(self, action_name: str) -> None:
        if action_name == "run_training_batch" and self.run is None:
            self.run = ProfiledRun(self.output_dir, **self.settings, report=_global_rank() == 0)
            self.run.start()

    def stop(self, action_name: str) -> None:
        if self.run is None or self.run.finished:
            return
        if action_name.endswith(".optimizer_step"):
            self._stepped = True
        elif action_name == "run_training_batch" and self._stepped:
            self._stepped = False
            self.run.step()

    def teardown(self, stage: str | None) -> None:
        if self.run is not None and not self.run.finished:
            self.run.finish()
        super().teardown(stage)

    def summary(self) -> str:
        if self.run is None or self.run.metrics is None:
            return "lightspeed: nothing recorded"
        figures = ", ".join(f"{k} {v}" for k, v in self.run.metrics.items())
        return f"lightspeed: {figures}; the report: {self.run.html_path}"


def first_dimension(batch: Any) -> int | None:
    """The first dimension of the first tensor in `batch` (a tensor, or a tuple, list or
    dict holding tensors); None where there is none."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    items = batch.values() if isinstance(batch, dict) else batch
    if isinstance(items, (list, tuple)) or isinstance(batch, dict):
        for item in items:
            found = first_dimension(item)
            if found is not None:
                return found
    return None


def _global_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
