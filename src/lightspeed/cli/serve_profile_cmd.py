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
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
) -> None:
    """Time a workload's forward alone (inference mode: no loss, labels or optimizer) at
    each batch size: latency (median, std, p99), samples/s, and each batch on the
    roofline."""
    from lightspeed.report.serving_report import latency_document
    from lightspeed.workflows.latency import latency_by_batch, parse_batch_sizes
    from lightspeed.workflows.profile import run_setup

    sizes = parse_batch_sizes(batch_sizes)
    use_threads(threads)
    workload, settings, hw = run_setup(target, device, dtype, None, hardware)
    profile = latency_by_batch(
        workload,
        sizes,
        hardware=hw,
        device=settings.device,
        dtype=settings.dtype,
        budget_s=budget,
    )
    report(latency_document(profile, hw), json_path, html_path=html_path)
