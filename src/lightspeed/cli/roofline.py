"""`lightspeed roofline`: place FLOPs and bytes on a device's roofline."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import HARDWARE_HELP, JsonOption, report


def roofline_command(
    flops: float = typer.Option(..., "--flops", metavar="FLOP", help="FLOPs of the work."),
    bytes_moved: float = typer.Option(
        ..., "--bytes", metavar="BYTES", help="Bytes the work reads and writes."
    ),
    hardware: str | None = typer.Option(None, "--hardware", metavar="ID", help=HARDWARE_HELP),
    dtype: str = typer.Option(
        "fp32", "--dtype", metavar="DTYPE", help="Precision whose peak applies."
    ),
    peak_flops: float | None = typer.Option(
        None, "--peak-flops", metavar="FLOP/S", help="Peak FLOP/s."
    ),
    bandwidth: float | None = typer.Option(
        None, "--bandwidth", metavar="BYTES/S", help="Bandwidth, bytes/s."
    ),
    json_path: Path | None = JsonOption,
) -> None:
    """Intensity, ridge point, bound, attainable FLOP/s and speed-of-light time of some work.

    Give the ceilings with --hardware ID [--dtype D], or with --peak-flops and --bandwidth.
    """
    from lightspeed.analysis.roofline import Ceilings, place
    from lightspeed.dtypes import Precision
    from lightspeed.errors import ConfigError
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.report.hardware_report import roofline_document

    explicit = peak_flops is not None or bandwidth is not None
    if hardware is not None and explicit:
        raise ConfigError("give either --hardware or --peak-flops with --bandwidth, not both.")
    if hardware is None:
        if peak_flops is None or bandwidth is None:
            raise ConfigError(
                "give the ceilings: --hardware ID (see `lightspeed hw list`), or both"
                " --peak-flops FLOP/s and --bandwidth bytes/s."
            )
        hw = None
        ceilings = Ceilings(peak_flops_per_s=peak_flops, bandwidth_bytes_per_s=bandwidth)
    else:
        hw = resolve_hardware(hardware, Device.CPU)
        ceilings = Ceilings.of(hw, Precision.parse(dtype))
    point = place(flops, bytes_moved, ceilings)
    report(roofline_document(point, hw), json_path)
