"""`lightspeed profile TARGET`: the speed-of-light profile of a training step."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import (
    BatchSizeOption,
    BudgetOption,
    DeviceOption,
    DtypeOption,
    HardwareOption,
    HtmlOption,
    JsonOption,
    LogDirOption,
    LogOption,
    PngOption,
    TargetArgument,
    ThreadsOption,
    WideOption,
    emit_partial,
    report,
    use_threads,
)

# --quick: seconds of timing, beside one profiled step.
QUICK_BUDGET_S = 0.5


def profile_command(
    target: str = TargetArgument,
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    batch_size: int | None = BatchSizeOption,
    hardware: str | None = HardwareOption,
    steps: int | None = typer.Option(
        None,
        "--steps",
        metavar="N",
        help="Profiled steps; each op's time is the median over them (default: 3, fewer"
        " for a step over 0.7 s, so they take about 2 s).",
    ),
    top: int = typer.Option(10, "--top", metavar="N", help="How many ops to list by headroom."),
    depth: int = typer.Option(2, "--depth", metavar="N", help="Levels of the module tree to show."),
    budget: float = BudgetOption,
    quick: bool = typer.Option(
        False,
        "--quick",
        help=f"A faster, rougher profile: at most {QUICK_BUDGET_S:g} s of timing and, unless"
        " --steps says otherwise, one profiled step.",
    ),
    shape_only: bool = typer.Option(
        False,
        "--shape-only",
        help="Run the step on fake tensors: exact FLOPs, bytes and memory, nothing"
        " allocated or executed, each op at its speed of light on --hardware (for models"
        " too large to run here).",
    ),
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
    png_path: Path | None = PngOption,
    wide: bool = WideOption,
    log: str | None = LogOption,
    log_dir: Path = LogDirOption,
) -> None:
    """Place every op of one training step on the roofline; report time, headroom and memory."""
    from lightspeed.analysis.profile_analysis import analyse
    from lightspeed.errors import ConfigError, ProfileIncomplete
    from lightspeed.facts.profile import Profile
    from lightspeed.report.profile_report import profile_document
    from lightspeed.workflows.profile import profile as profile_step
    from lightspeed.workflows.profile import profile_shapes

    use_threads(threads)
    if quick:
        budget = min(budget, QUICK_BUDGET_S)
        steps = steps or 1
    if steps is not None and steps < 1:
        raise ConfigError(f"--steps {steps} must be at least 1.")
    if shape_only:
        shapes = profile_shapes(
            target, device=device, dtype=dtype, hardware=hardware, batch_size=batch_size
        )
        report(
            profile_document(analyse(shapes), top=top, depth=depth),
            json_path,
            wide=wide,
            html_path=html_path,
            png_path=png_path,
            log=log,
            log_dir=log_dir,
        )
        return
    try:
        profile = profile_step(
            target,
            device=device,
            dtype=dtype,
            hardware=hardware,
            batch_size=batch_size,
            steps=steps,
            budget_s=budget,
        )
    except ProfileIncomplete as exc:
        # What was measured before the failure is still written.
        if isinstance(exc.partial, Profile):
            emit_partial(profile_document(analyse(exc.partial)), json_path, html_path, png_path)
        raise
    analysis = analyse(profile)
    report(
        profile_document(analysis, top=top, depth=depth),
        json_path,
        wide=wide,
        html_path=html_path,
        png_path=png_path,
        log=log,
        log_dir=log_dir,
    )
