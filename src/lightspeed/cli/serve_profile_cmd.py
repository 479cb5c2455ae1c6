"""`lightspeed serve-profile TARGET`: inference latency by batch size (ℓ(b))."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import (
    DeviceOption,
    DtypeOption,
    HardwareOption,
    HtmlOption,
    JsonOption,
    TargetArgument,
    ThreadsOption,
    autocast_precision,
    report,
    use_threads,
)


def serve_profile_command(
    target: str = TargetArgument,
    batch_sizes: str = typer.Option(
        "1,2,4,8,16,32",
        "--batch-sizes",
        metavar="N[,N…]",
        help="Batch sizes to time the forward at, comma-separated.",
    ),
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    hardware: str | None = HardwareOption,
    budget: float = typer.Option(
        1.0,
        "--budget",
        metavar="SECONDS",
        help="Seconds to spend timing each batch size (at least 20 calls each).",
    ),
    predict_hardware: str | None = typer.Option(
        None,
        "--predict-hardware",
        metavar="ID",
        help="Also predict ℓ(b) on this hardware (a catalog id, see `lightspeed hw list`),"
        " each op carried over as `lightspeed predict --hardware` carries a step's.",
    ),
    predict_dtype: str | None = typer.Option(
        None,
        "--predict-dtype",
        metavar="DTYPE",
        help="Also predict ℓ(b) of the fp32 forward under autocast to bf16 or fp16, as"
        " `lightspeed predict --dtype` does a step's.",
    ),
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
) -> None:
    """Time a workload's forward alone (inference mode: no loss, labels or optimizer) at
    each batch size: latency (median, std, p99), samples/s, and each batch on the
    roofline; predicted on other hardware or in lower precision if asked."""
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.report.serving_report import latency_document
    from lightspeed.workflows.latency import (
        check_forecastable,
        forecast_latency,
        latency_by_batch,
        parse_batch_sizes,
    )
    from lightspeed.workflows.profile import run_setup

    sizes = parse_batch_sizes(batch_sizes)
    use_threads(threads)
    autocast = None
    if predict_dtype is not None:
        autocast = autocast_precision(predict_dtype, "--predict-dtype")
    workload, settings, hw = run_setup(target, device, dtype, None, hardware)
    check_forecastable(settings, autocast)
    other = None
    if predict_hardware is not None:
        other = resolve_hardware(predict_hardware, settings.device)
    profile = latency_by_batch(
        workload,
        sizes,
        hardware=hw,
        device=settings.device,
        dtype=settings.dtype,
        budget_s=budget,
    )
    forecast = None
    if other is not None or autocast is not None:
        forecast = forecast_latency(
            workload, profile, hardware=hw, settings=settings, target=other, autocast=autocast
        )
    report(latency_document(profile, hw, forecast), json_path, html_path=html_path)
