"""`lightspeed hw list | show ID | calibrate | link`."""

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
def list_command(
    links: bool = typer.Option(
        False, "--links", help="List the catalog's links (NVLink, PCIe, InfiniBand, Ethernet)."
    ),
    json_path: Path | None = JsonOption,
    wide: bool = WideOption,
) -> None:
    """List the catalog's hardware ids with their peaks and bandwidth (--links: its links,
    with their bandwidth each way and latency)."""
    if links:
        from lightspeed.hardware.links import catalog_link, link_ids
        from lightspeed.report.data_parallel_report import link_list_document

        report(link_list_document([catalog_link(i) for i in link_ids()]), json_path, wide=wide)
        return
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
    from lightspeed.report.hardware_report import hardware_document

    dev = Device.parse(device)
    if hw_id == "local":
        from lightspeed.hardware.resolve import resolve_hardware

        use_threads(threads)
        hw = resolve_hardware(hw_id, dev)
    else:  # a catalog entry: read, never measured, so torch is not imported (2 s)
        from lightspeed.hardware.catalog import catalog_hardware

        hw = catalog_hardware(hw_id)
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


@app.command("link")
def link_command(
    nproc: int = typer.Option(
        2, "--nproc", metavar="N", help="Processes torchrun starts; ranks 0 and 1 ping-pong."
    ),
    device: str = typer.Option("cpu", "--device", metavar="DEVICE", help=DEVICE_HELP),
    max_bytes: int = typer.Option(
        64 * 2**20,
        "--max-bytes",
        metavar="BYTES",
        help="Largest message; sizes run from 4 B up to it, ×4 apart.",
    ),
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
) -> None:
    """Measure the link between two processes on this machine (gloo on a CPU, NCCL
    between GPUs): ping-pong from 4 B to 64 MiB, then its latency and bandwidth."""
    from lightspeed.errors import ConfigError
    from lightspeed.facts.device import Device
    from lightspeed.measure.distributed.link_bench import measure_link
    from lightspeed.report.data_parallel_report import link_document

    if max_bytes < 16:
        raise ConfigError(f"--max-bytes {max_bytes} must be at least 16.")
    sizes = [4 * 4**i for i in range(32) if 4 * 4**i <= max_bytes]
    measured = measure_link(nproc, device=Device.parse(device), sizes=sizes, threads=threads)
    report(link_document(measured), json_path)
