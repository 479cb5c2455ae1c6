"""`lightspeed tune TARGET [--memory-budget SIZE] [--only amp,checkpoint,gist,fuse,loader]
[--checkpoint auto|MODULES] [--jobs K] [--emit PATH]`: each optimization predicted,
applied, checked for equivalence and measured; the best kept; the data loader's options
tuned against the measured wait."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from lightspeed.cli.common import (
    BatchSizeOption,
    BudgetOption,
    DeviceOption,
    HardwareOption,
    HtmlOption,
    JsonOption,
    ThreadsOption,
    WideOption,
    report,
    use_threads,
)


def tune_command(
    target: str = typer.Argument(
        ...,
        metavar="TARGET",
        help="The workload: a suite name, file.py:NAME or hf:MODEL_TYPE.",
        show_default=False,
    ),
    memory_budget: str | None = typer.Option(
        None,
        "--memory-budget",
        metavar="SIZE",
        help="The peak memory the step must fit (bytes, or 40MiB, 2GiB…); the fastest"
        " equivalent candidate within it is kept.",
    ),
    only: str | None = typer.Option(
        None,
        "--only",
        metavar="NAMES",
        help="The candidates to try, comma-separated: amp, checkpoint, gist, fuse, loader"
        " (all by default; fuse with --jobs; loader for a workload with a data loader).",
    ),
    checkpoint: str | None = typer.Option(
        None,
        "--checkpoint",
        metavar="auto|ops[+K][:MODULES]|MODULES",
        help="The modules the checkpoint candidate wraps, as predict --checkpoint takes them:"
        " 'auto' (the √N segment plan), 'ops' or 'ops:MODULES' (recomputed op by op;"
        " 'ops+K' with K kinds of product of each block recomputed too), or"
        " module names or patterns, comma-separated (blocks.*); by default the planner"
        " chooses them (to fit --memory-budget, or to halve the activations kept).",
    ),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        metavar="K",
        help="K jobs of this step to run (a sweep's trials): adds fusing them into one"
        " step, its step time a job's share.",
    ),
    profile_path: Path | None = typer.Option(
        None,
        "--profile",
        metavar="PATH",
        help="Write the kept candidate's measured profile there (JSON, as profile --json).",
    ),
    emit_path: Path | None = typer.Option(
        None,
        "--emit",
        metavar="PATH",
        help="Write the kept candidate as Python to run in your own script (plan.py).",
    ),
    device: str = DeviceOption,
    hardware: str | None = HardwareOption,
    batch_size: int | None = BatchSizeOption,
    budget: float = BudgetOption,
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
    wide: bool = WideOption,
) -> None:
    """Try each optimization — mixed precision, activation checkpointing, Gist's
    encodings — on a training step: its predicted gain, the transform applied, an
    equivalence check, and its measured gain, side by side; the best is kept."""
    from lightspeed.errors import ConfigError
    from lightspeed.report.profile_json import save_profile
    from lightspeed.report.render_json import write_text
    from lightspeed.report.tune_report import tune_document
    from lightspeed.units import parse_size
    from lightspeed.workflows.tune import tune
    from lightspeed.workflows.tune_code import plan_code
    from lightspeed.workload.targets import load_target

    use_threads(threads)
    workload = load_target(target)
    if batch_size is not None:
        workload = workload.with_batch_size(batch_size)
    tuning = tune(
        workload,
        memory_budget_bytes=None if memory_budget is None else parse_size(memory_budget),
        only=None if only is None else [name.strip() for name in only.split(",")],
        device=device,
        hardware=hardware,
        budget_s=budget,
        jobs=jobs,
        checkpoint=checkpoint,
    )
    report(tune_document(tuning), json_path, wide=wide, html_path=html_path)
    if emit_path is not None:
        write_text(emit_path, plan_code(tuning))
        print(f"wrote {emit_path}", file=sys.stderr)
    if profile_path is not None:
        if tuning.chosen is None or tuning.chosen.profile is None:
            raise ConfigError(f"--profile {profile_path}: no candidate was kept, so none written.")
        save_profile(tuning.chosen.profile, profile_path)
