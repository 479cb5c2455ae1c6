"""`lightspeed time TARGET`: the median step time and throughput of a workload."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import HARDWARE_HELP, DeviceOption, DtypeOption, emit_json, show


def time_command(
    target: str = typer.Argument(
        ..., help="A suite name (see `lightspeed suite`) or file.py:NAME."
    ),
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    batch_size: int | None = typer.Option(None, "--batch-size", help="Samples per step."),
    hardware: str | None = typer.Option(None, "--hardware", help=HARDWARE_HELP),
    warmup: int = typer.Option(3, "--warmup", help="Untimed steps before timing."),
    budget: float = typer.Option(2.0, "--budget", help="Seconds to spend timing."),
    min_replicates: int = typer.Option(5, "--min-replicates", help="Fewest timed blocks."),
    json_path: Path | None = typer.Option(
        None, "--json", help="Also write JSON here ('-': stdout)."
    ),
) -> None:
    """Time a workload's training step: median with IQR, samples/s, tokens/s where known."""
    from lightspeed.dtypes import step_precision
    from lightspeed.hardware import resolve_hardware
    from lightspeed.measure.device import Device
    from lightspeed.measure.step import StepSettings
    from lightspeed.measure.timer import TimerConfig
    from lightspeed.measure.timing import time_workload
    from lightspeed.report import json_report, terminal
    from lightspeed.workload import load_target

    settings = StepSettings(device=Device.parse(device), precision=step_precision(dtype))
    config = TimerConfig(warmup_steps=warmup, budget_s=budget, min_replicates=min_replicates)
    workload = load_target(target)
    if batch_size is not None:
        workload = workload.with_batch_size(batch_size)
    hw = resolve_hardware(hardware, settings.device)
    timing = time_workload(workload, settings, config)
    if json_path is not None:
        emit_json(json_report.timing_doc(timing, hw), json_path)
    if json_path is None or str(json_path) != "-":
        show(terminal.timing_report(timing, hw))
