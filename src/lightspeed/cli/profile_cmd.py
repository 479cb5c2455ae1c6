"""`lightspeed profile TARGET`: the speed-of-light profile of a training step."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import HARDWARE_HELP, DeviceOption, DtypeOption, emit_json, show


def profile_command(
    target: str = typer.Argument(
        ..., help="A suite name (see `lightspeed suite`) or file.py:NAME."
    ),
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    batch_size: int | None = typer.Option(None, "--batch-size", help="Samples per step."),
    hardware: str | None = typer.Option(None, "--hardware", help=HARDWARE_HELP),
    steps: int = typer.Option(1, "--steps", help="Profiled steps; each op's time is the median."),
    top: int = typer.Option(10, "--top", help="How many ops to list by headroom."),
    depth: int = typer.Option(2, "--depth", help="Levels of the module tree to show."),
    budget: float = typer.Option(2.0, "--budget", help="Seconds to spend timing the step."),
    json_path: Path | None = typer.Option(
        None, "--json", help="Also write JSON here ('-': stdout)."
    ),
) -> None:
    """Place every op of one training step on the roofline; report time, headroom and memory."""
    from lightspeed.analysis.summary import analyse
    from lightspeed.dtypes import step_precision
    from lightspeed.errors import ConfigError, ProfileIncomplete
    from lightspeed.hardware import resolve_hardware
    from lightspeed.measure.device import Device
    from lightspeed.measure.profile_facts import Profile
    from lightspeed.measure.profile_run import profile_workload
    from lightspeed.measure.step import StepSettings
    from lightspeed.measure.timer import TimerConfig
    from lightspeed.report.profile_json import profile_doc
    from lightspeed.report.profile_terminal import profile_report
    from lightspeed.workload import load_target

    if steps < 1:
        raise ConfigError(f"--steps {steps} must be at least 1.")
    settings = StepSettings(device=Device.parse(device), precision=step_precision(dtype))
    workload = load_target(target)
    if batch_size is not None:
        workload = workload.with_batch_size(batch_size)
    hw = resolve_hardware(hardware, settings.device)
    try:
        profile = profile_workload(
            workload, hw, settings, timer=TimerConfig(budget_s=budget), profiled_steps=steps
        )
    except ProfileIncomplete as exc:
        # What was measured before the failure is still written.
        if json_path is not None and isinstance(exc.partial, Profile):
            emit_json(profile_doc(analyse(exc.partial)), json_path)
        raise
    analysis = analyse(profile)
    if json_path is not None:
        emit_json(profile_doc(analysis), json_path)
    if json_path is None or str(json_path) != "-":
        show(profile_report(analysis, top=top, depth=depth))
