"""`lightspeed hw list | show ID | calibrate`."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import (
    CONTEXT_SETTINGS,
    DEVICE_HELP,
    JsonOption,
    ThreadsOption,
    WideOption,
    report,
    use_threads,
)

app = typer.Typer(
    help="The hardware catalog and the calibrated local device.",
    no_args_is_help=True,
    context_settings=CONTEXT_SETTINGS,
)


@app.command("list")
def list_command(json_path: Path | None = JsonOption, wide: bool = WideOption) -> None:
    """List the catalog's hardware ids with their peaks and bandwidth."""
    from lightspeed.hardware import catalog_hardware, catalog_ids
    from lightspeed.report.hardware_report import hardware_list_document

    entries = [catalog_hardware(hw_id) for hw_id in catalog_ids()]
    report(hardware_list_document(entries), json_path, wide=wide)


@app.command("show")
def show_command(
    hw_id: str = typer.Argument(
        ..., metavar="ID", help="Catalog id, or 'local'.", show_default=False
    ),
    device: str = typer.Option(
        "cpu", "--device", metavar="DEVICE", help=DEVICE_HELP + " (for 'local')"
    ),
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
) -> None:
    """Show one hardware's peaks per precision, bandwidth, memory, links and sources
    ('local' calibrates the device first when no valid calibration is cached)."""
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.report.hardware_report import hardware_document

    use_threads(threads)
    hw = resolve_hardware(hw_id, Device.parse(device))
    report(hardware_document(hw), json_path)


@app.command("calibrate")
def calibrate_command(
    device: str = typer.Option("cpu", "--device", metavar="DEVICE", help=DEVICE_HELP),
    force: bool = typer.Option(
        False,
        "--force",
        help="Cache the new figures even when they look implausible (cache slower than"
        " memory, or far below the previous calibration).",
    ),
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
) -> None:
    """Measure the local device's compute and memory ceilings over its kernel sets, and
    cache them (under a minute on a 2-core CPU)."""
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import local_hardware
    from lightspeed.report.hardware_report import hardware_document

    use_threads(threads)
    hw = local_hardware(Device.parse(device), recalibrate=True, force=force)
    report(hardware_document(hw), json_path)
