"""`ProfiledRun`: what every framework callback does, stepped once per optimizer step.

A run profiles a wait/warm-up/active stretch of training steps under torch.profiler
(`lightspeed.observe`), writes the trace to `OUTPUT_DIR/traces/`, and once the active
steps are recorded analyses it as `lightspeed trace` does: the report's JSON and HTML go
to `OUTPUT_DIR/lightspeed.json` and `OUTPUT_DIR/lightspeed.html`, and `metrics` holds the
figures a callback logs. A framework calls `start()` before the first step, `step()`
after each optimizer step (after its gradient accumulation, so a step is what the
optimizer takes) and `finish()` at the end of training; `finish()` is a no-op once the
run has finished by itself. A hand-written loop (accelerate's, say) uses it as a context
manager:

    with ProfiledRun("ls", report=accelerator.is_main_process) as run:
        for batch in loader:
            with accelerator.accumulate(model):
                ...                                  # forward, backward, optimizer step
            if accelerator.sync_gradients:
                run.step()
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightspeed import trace
from lightspeed.errors import LightspeedError
from lightspeed.integrations.sinks import (
    PREFIX,
    log_result,
    open_sinks,
    result_metrics,
    sink_names,
)
from lightspeed.trace import TraceAnalysis
from lightspeed.trace.trim import trim_trace
from lightspeed.workflows.observe import Observation, ObserveSchedule, observe
from lightspeed.workload.torch_internals import profiler_running

log = logging.getLogger(__name__)

# Each rank's trace at most, in MB of events' JSON: a few steps of a large model fit.
DEFAULT_MAX_TRACE_MB = 500.0


class ProfiledRun:
    """One profiled stretch of a training run (see the module docstring).

    `wait` optimizer steps run unprofiled, `warmup` profiled but discarded, `active`
    recorded. `report` False: the trace is analysed and `metrics` set, but no JSON or
    HTML is written (another rank writes them). `log` ("wandb", "mlflow",
    "tensorboard", comma-separated; `integrations.sinks`): where the reporting process
    also logs the figures, and the JSON and HTML as artifacts, under `output_dir`.
    `peak_flops` (FLOP/s): the peak `mfu` is taken against, in place of the catalog GPU's
    (a CPU, a GPU the catalog lacks, or the peak a ThroughputMonitor is given).
    `max_trace_mb`: each rank's trace is cut to its first recorded steps whose events fit
    in that many MB of JSON (`trace.trim`; None: no limit). The profiler records no
    stacks, memory or modules, only what the analysis reads."""

    def __init__(
        self,
        output_dir: str | Path,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        report: bool = True,
        log: str | None = None,
        peak_flops: float | None = None,
        max_trace_mb: float | None = DEFAULT_MAX_TRACE_MB,
    ) -> None:
        run_settings(wait, warmup, active, log, peak_flops, max_trace_mb)  # checks them
        self.output_dir = Path(output_dir)
        self.report = report
        self.peak_flops = peak_flops
        self.max_trace_mb = max_trace_mb
        self.log = log
        # Shapes recorded, as torchtitan and torchtune record them: a GPU's matrix
        # products placed on its roofline.
        self._observation: Observation = observe(
            wait=wait,
            warmup=warmup,
            active=active,
            trace_dir=self.output_dir / "traces",
            record_shapes=True,
        )
        self._running = False
        self._finished = False
        # Batches, samples and items of the recorded steps (`count`); None: not counted.
        self._counted: dict[str, float | None] = {"batches": None, "samples": None, "items": None}
        self.metrics: dict[str, float | str] | None = None
        self.analysis: TraceAnalysis | None = None

    @property
    def json_path(self) -> Path:
        return self.output_dir / "lightspeed.json"

    @property
    def html_path(self) -> Path:
        return self.output_dir / "lightspeed.html"

    @property
    def trace_path(self) -> Path | None:
        """The trace written (None: nothing recorded yet)."""
        return self._observation.trace_path

    @property
    def finished(self) -> bool:
        return self._finished

    def __enter__(self) -> ProfiledRun:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def start(self) -> None:
        """Begin profiling: call before the first training step."""
        if self._running or self._finished:
            return
        if profiler_running():
            # Two profilers cannot share a process's Kineto session.
            log.warning(
                "another torch.profiler is already recording: lightspeed records nothing this"
                " run (stop the other one, or read its trace with `lightspeed trace`)"
            )
            self._finished = True
            return
        self._observation.__enter__()
        self._running = True

    def count(self, batches: int = 1, samples: int | None = None, items: int | None = None) -> None:
        """Count a batch (or `batches`) of the optimizer step now running, with its
        `samples` and `items` (tokens, say) where known: over the recorded steps they give
        `batches_per_s`, `samples_per_s` and `items_per_s` (per second of those steps as
        the trace times them). Call before `step()` ends the optimizer step."""
        plan, taken = self._observation.plan, self._observation.steps_taken
        if not self._running or not plan.wait + plan.warmup <= taken < plan.steps:
            return
        for key, value in (("batches", batches), ("samples", samples), ("items", items)):
            if value is not None:
                self._counted[key] = (self._counted[key] or 0) + value

    def step(self) -> None:
        """One optimizer step is done; the run finishes once its active steps are recorded."""
        if not self._running:
            return
        self._observation.step()
        if self._observation.steps_taken >= self._observation.plan.steps:
            self.finish()

    def finish(self) -> Mapping[str, float | str] | None:
        """Stop profiling; analyse and report what was recorded (None: nothing was, as
        when training ended before the active steps; it logs a warning saying so, and never
        stops the training that called it)."""
        if self._finished:
            return self.metrics
        self._finished = True
        if not self._running:
            return None
        self._running = False
        recorded = self._stop()
        # Every rank of a distributed run learns where the others' traces are (and waits
        # for them to be written); the reporting rank analyses them together.
        traces = _gathered(str(recorded) if recorded is not None else None)
        mine = [recorded] if recorded is not None else []
        if self.report and len(traces) > 1:
            mine = [Path(p) for p in traces if p is not None]
        if not mine:
            return None
        # One process: the callback runs inside a training process, which may hold threads
        # (a process group's) that a fork would copy in the middle of their work.
        self.analysis = trace.analyse(mine, workers=1)
        # The figures are the report's JSON's (`sinks.result_metrics`), so a logger shows
        # what the report says: made once, written where this process reports.
        result = self._result(self.analysis)
        figures = result_metrics(result)
        self.metrics = figures | self._rates(self.analysis) | self._mfu(figures)
        if self.report and self.log:
            self._log(result, self._observation.steps_taken)
        return self.metrics

    def _rates(self, analysis: TraceAnalysis) -> dict[str, float | str]:
        """What `count` counted, per second of this process's recorded steps."""
        seconds = float(analysis.ranks[0].steps.step_s.sum())
        return {
            f"{PREFIX}{key}_per_s": value / seconds
            for key, value in self._counted.items()
            if value is not None and seconds > 0
        }

    def _mfu(self, figures: Mapping[str, float | str]) -> dict[str, float | str]:
        """With `peak_flops`: the recorded steps' matrix-product FLOPs a second over it."""
        rate = figures.get(PREFIX + "flops_per_s")
        if self.peak_flops is None or not isinstance(rate, float):
            return {}
        return {PREFIX + "mfu": rate / self.peak_flops}

    def _stop(self) -> Path | None:
        """Stop the profiler; the trace it wrote (None: nothing was recorded, and why is
        logged as a warning)."""
        plan, taken = self._observation.plan, self._observation.steps_taken
        try:
            self._observation.__exit__(None, None, None)
        except LightspeedError as exc:
            log.warning("nothing analysed: %s", exc)
            return None
        if taken <= plan.wait + plan.warmup:
            # torch.profiler writes the warm-up it was in when stopped: not a step of it
            # was recorded, and a trace of it would only mislead.
            if self.trace_path is not None:
                self.trace_path.unlink(missing_ok=True)
            log.warning(
                "nothing analysed: training ended after %d optimizer step(s), before step %d,"
                " the first one recorded; train longer or lower wait/warmup.",
                taken,
                plan.wait + plan.warmup + 1,
            )
            return None
        if self.trace_path is not None and self.max_trace_mb is not None:
            cut = trim_trace(self.trace_path, int(self.max_trace_mb * 1e6))
            if cut is not None:
                log.warning(
                    "the trace keeps its first %d of %d recorded steps (%.0f of %.0f MB of"
                    " events) to stay under max_trace_mb=%g; record fewer steps (active) or"
                    " raise the limit for all of them",
                    cut.steps_kept,
                    cut.steps_recorded,
                    cut.bytes_kept / 1e6,
                    cut.bytes_recorded / 1e6,
                    self.max_trace_mb,
                )
        return self.trace_path

    def _log(self, result: Mapping[str, Any], step: int) -> None:
        try:
            sinks = open_sinks(self.log or "", self.output_dir, run_name=self.output_dir.name)
        except LightspeedError as exc:  # the report is written; training goes on
            log.warning("not logged: %s", exc)
            return
        try:
            log_result(sinks, result, (self.json_path, self.html_path), step)
        finally:
            for sink in sinks:
                sink.close()

    def _result(self, analysis: TraceAnalysis) -> Mapping[str, Any]:
        """The report's JSON object. Where this process reports: written, read back once,
        and its HTML drawn from it as `lightspeed trace --json --html` draws it."""
        from lightspeed.report import read_json, render_json
        from lightspeed.report.html import write_html
        from lightspeed.report.trace_report import trace_document

        obj = render_json.render(trace_document(analysis))
        if not self.report:
            return obj
        render_json.write(self.json_path, obj)
        result: dict[str, Any] = read_json.load(self.json_path)
        write_html(self.html_path, result)
        log.info("wrote %s and %s", self.json_path, self.html_path)
        return result


def run_settings(
    wait: int,
    warmup: int,
    active: int,
    log: str | None,
    peak_flops: float | None = None,
    max_trace_mb: float | None = DEFAULT_MAX_TRACE_MB,
) -> dict[str, Any]:
    """What a framework adapter hands every `ProfiledRun` it makes, its own arguments,
    checked as the adapter is made, not once training has begun: the schedule, the
    sinks' names (known and installed), the peak and the size limit."""
    ObserveSchedule(wait=wait, warmup=warmup, active=active)
    if log is not None:
        sink_names(log)
    if peak_flops is not None and not peak_flops > 0:
        raise LightspeedError(f"peak_flops must be a positive FLOP/s, not {peak_flops!r}.")
    if max_trace_mb is not None and not max_trace_mb > 0:
        raise LightspeedError(f"max_trace_mb must be a positive size, not {max_trace_mb!r}.")
    return {
        "wait": wait,
        "warmup": warmup,
        "active": active,
        "log": log,
        "peak_flops": peak_flops,
        "max_trace_mb": max_trace_mb,
    }


def _gathered(path: str | None) -> list[str | None]:
    """Each rank's `path`, in rank order, where a process group is initialized (a
    collective every rank calls: none goes on before all have written their trace);
    else this process's alone."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return [path]
    paths: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(paths, path)
    return paths
