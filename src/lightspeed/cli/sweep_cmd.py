"""`lightspeed sweep TARGET --space "…" [--trials N] [--k K] [--steps N]`: a
hyper-parameter search, its trials trained K at a time as one fused job."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import (
    DeviceOption,
    HtmlOption,
    JsonOption,
    ThreadsOption,
    WideOption,
    emit_partial,
    report,
    use_threads,
)


def sweep_command(
    target: str = typer.Argument(
        ...,
        metavar="TARGET",
        help="The workload: a suite name, file.py:NAME or hf:MODEL_TYPE.",
        show_default=False,
    ),
    space: str = typer.Option(
        ...,
        "--space",
        metavar="SPACE",
        help="The optimizer's hyper-parameters to search: NAME=loguniform(LOW,HIGH),"
        " NAME=uniform(LOW,HIGH) or NAME=[V,V,…], separated by spaces"
        ' ("lr=loguniform(1e-5,1e-2) weight_decay=[0,0.01,0.1]").',
        show_default=False,
    ),
    trials: int = typer.Option(32, "--trials", metavar="N", help="Trials to run."),
    k: int = typer.Option(8, "--k", metavar="K", help="Trials trained at a time as one fused job."),
    steps: int = typer.Option(100, "--steps", metavar="N", help="Training steps a trial."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="The sampler's and the data's seed."),
    serial_sample: int = typer.Option(
        4,
        "--serial-sample",
        metavar="N",
        help="Trials run again one at a time to measure the serial sweep's time (0: none).",
    ),
    device: str = DeviceOption,
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
    wide: bool = WideOption,
) -> None:
    """Search a workload's optimizer hyper-parameters with Optuna, training the trials K
    at a time as one fused job: each trial's final loss, the best configuration, and the
    wall time beside the serial sweep's, measured on a sample of trials."""
    from lightspeed.errors import SweepIncomplete
    from lightspeed.facts.sweep import Sweep
    from lightspeed.report.sweep_report import sweep_document
    from lightspeed.workflows.sweep import sweep
    from lightspeed.workload.targets import load_target

    use_threads(threads)
    workload = load_target(target)
    try:
        found = sweep(
            workload,
            space,
            trials=trials,
            k=k,
            steps=steps,
            seed=seed,
            serial_sample=serial_sample,
            device=device,
        )
    except SweepIncomplete as exc:
        # The trials finished before the failure are still written.
        if isinstance(exc.partial, Sweep):
            emit_partial(sweep_document(exc.partial), json_path, html_path, None)
        raise
    report(sweep_document(found), json_path, wide=wide, html_path=html_path)
