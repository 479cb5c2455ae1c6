"""`LightspeedCallback` for the Hugging Face `Trainer` (the `hf` extra).

    from lightspeed.integrations.transformers import LightspeedCallback

    trainer = Trainer(model, args, train_dataset=..., callbacks=[LightspeedCallback("ls")])
    trainer.train()   # ls/traces/*.pt.trace.json.gz, ls/lightspeed.json, ls/lightspeed.html

A wait/warm-up/active schedule of optimizer steps (`on_step_end` comes once per
optimizer step, after gradient accumulation) is profiled and analysed as `lightspeed
trace` does; the figures (`ProfiledRun.metrics`) join the trainer's
`state.log_history` at the step they were taken, so `trainer_state.json` keeps them. Every
process writes its own trace; the main process (`state.is_world_process_zero`) writes the
report, of every rank's trace where a process group is initialized.

The trainer's own reporting integrations (`report_to`: W&B, MLflow, TensorBoard, …) log
what reaches `on_log` before them, and a callback passed to `Trainer` comes after them:

    LightspeedCallback("ls").attach(trainer)   # first in line: report_to logs the figures

puts it first, and the step its figures are ready the trainer logs, with them among its
own (the numbers; the bound, a word, stays in `log_history` and the report).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lightspeed.integrations.run import DEFAULT_MAX_TRACE_MB, ProfiledRun, run_settings
from lightspeed.integrations.sinks import numbers


class LightspeedCallback(TrainerCallback):
    """Profile optimizer steps `wait + 1 + warmup` to `wait + warmup + active` of a
    `Trainer` run and write the trace, the report's JSON and its HTML to `output_dir`;
    with `log` ("wandb", "mlflow", "tensorboard", comma-separated) log the figures and
    the files there too (`integrations.sinks`). `peak_flops` (FLOP/s): the peak `mfu`
    is taken against, where the catalog has none (a CPU) or to choose another.
    `max_trace_mb`: each rank's trace cut to its first steps that fit (`ProfiledRun`)."""

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
        self.output_dir = Path(output_dir)
        self.settings = run_settings(wait, warmup, active, log, peak_flops, max_trace_mb)
        self.run: ProfiledRun | None = None
        # Figures ready for the trainer's next `on_log` (the reporting integrations).
        self._pending: dict[str, float] = {}

    def attach(self, trainer: Any) -> LightspeedCallback:
        """Add this callback to `trainer` ahead of its other callbacks, so that its
        figures reach the trainer's reporting integrations (`report_to`); returns it."""
        trainer.callback_handler.callbacks.insert(0, self)
        return self

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run = ProfiledRun(
            self.output_dir, **self.settings, report=bool(state.is_world_process_zero)
        )
        self.run.start()

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        # An optimizer step is gradient_accumulation_steps batches of the per-device size
        # (the epoch's last may be smaller).
        if self.run is not None and not self.run.finished:
            batches = args.gradient_accumulation_steps
            self.run.count(batches, batches * args.per_device_train_batch_size)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.run is None or self.run.finished:
            return
        self.run.step()
        if self.run.finished:
            self._logged(state)
            control.should_log = bool(self._pending)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs is not None and self._pending:
            logs.update(self._pending)
            self._pending = {}

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.run is not None and not self.run.finished:
            self.run.finish()
            self._logged(state)

    def _logged(self, state: TrainerState) -> None:
        assert self.run is not None
        if self.run.metrics is not None:
            state.log_history.append({**self.run.metrics, "step": state.global_step})
            self._pending = numbers(self.run.metrics)
