"""`lightspeed predict TARGET|PROFILE.json --hardware ID`: a step predicted on other
hardware from a measured profile."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import (
    BudgetOption,
    DeviceOption,
    DtypeOption,
    HtmlOption,
    JsonOption,
    PngOption,
    ThreadsOption,
    WideOption,
    report,
    use_threads,
)


def predict_command(
    source: str = typer.Argument(
        ...,
        metavar="TARGET|PROFILE.json",
        help="A profile saved with --json, or a workload to profile here first (a suite"
        " name, file.py:NAME or hf:MODEL_TYPE).",
        show_default=False,
    ),
    hardware: str = typer.Option(
        ...,
        "--hardware",
        metavar="ID",
        help="The hardware to predict the step on: a catalog id (see `lightspeed hw list`)"
        " or 'local' (this machine, calibrated).",
        show_default=False,
    ),
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    budget: float = BudgetOption,
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
    png_path: Path | None = PngOption,
    wide: bool = WideOption,
) -> None:
    """Predict a training step on other hardware from a measured profile: each op keeps
    its fraction of the speed of light on the target's roofline."""
    from lightspeed.analysis.profile_analysis import analyse
    from lightspeed.api import profile as profile_step
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.predict import predict
    from lightspeed.report.profile_json import load_profile
    from lightspeed.report.profile_report import profile_document

    use_threads(threads)
    if source.endswith(".json") or Path(source).is_file():
        measured = load_profile(source)
    else:
        measured = profile_step(source, device=device, dtype=dtype, budget_s=budget)
    target = resolve_hardware(hardware, Device.parse(device))
    predicted = predict(measured, hardware=target)
    report(
        profile_document(analyse(predicted)),
        json_path,
        wide=wide,
        html_path=html_path,
        png_path=png_path,
    )
