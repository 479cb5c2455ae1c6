"""`lightspeed hw list | show ID | calibrate`."""

from __future__ import annotations

import typer

from lightspeed.cli.common import DEVICE_HELP, emit_json, show

app = typer.Typer(
    help="The hardware catalog and the calibrated local device.", no_args_is_help=True
)


@app.command("list")
def list_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the catalog's hardware ids with their peaks and bandwidth."""
    from lightspeed.hardware import catalog_hardware, catalog_ids
    from lightspeed.report import documents, json_report, terminal

    entries = [catalog_hardware(hw_id) for hw_id in catalog_ids()]
    if as_json:
        body = {"hardware": [json_report.hardware_doc(h) for h in entries]}
        emit_json(documents.document("hardware_list", body), None)
    else:
        show(terminal.hardware_list(entries))


@app.command("show")
def show_command(
    hw_id: str = typer.Argument(..., metavar="ID", help="Catalog id, or 'local'."),
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP + " (for 'local')"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Show one hardware's peaks per precision, bandwidth, memory, links and sources."""
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.report import json_report, terminal

    hw = resolve_hardware(hw_id, Device.parse(device))
    if as_json:
        emit_json(json_report.hardware_doc(hw), None)
    else:
        show(terminal.hardware_details(hw))


@app.command("calibrate")
def calibrate_command(
    device: str = typer.Option("cpu", "--device", help=DEVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Measure the local device's matmul and memory ceilings, and cache them."""
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import local_hardware
    from lightspeed.report import json_report, terminal

    hw = local_hardware(Device.parse(device), recalibrate=True)
    if as_json:
        emit_json(json_report.hardware_doc(hw), None)
    else:
        show(terminal.hardware_details(hw))
