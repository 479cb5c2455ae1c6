"""Options and helpers every command shares."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console, RenderableType

from lightspeed.report import documents

DEVICE_HELP = "Where to run: cpu or cuda."
DTYPE_HELP = "Precision of the step: fp32, bf16 or fp16 (parameters, activations and batch)."
HARDWARE_HELP = "Hardware to model on: a catalog id (see `lightspeed hw list`) or 'local'."

TargetArgument = typer.Argument(..., help="A suite name (see `lightspeed suite`) or file.py:NAME.")
DeviceOption = typer.Option("cpu", "--device", help=DEVICE_HELP)
DtypeOption = typer.Option("fp32", "--dtype", help=DTYPE_HELP)
BatchSizeOption = typer.Option(None, "--batch-size", help="Samples per step.")
HardwareOption = typer.Option(None, "--hardware", help=HARDWARE_HELP)
BudgetOption = typer.Option(2.0, "--budget", help="Seconds to spend timing the step.")
JsonOption = typer.Option(None, "--json", help="Also write JSON here ('-': stdout).")


def report(renderable: RenderableType, doc: dict[str, object], json_path: Path | None) -> None:
    """Write `doc` where --json says, and print the report unless the JSON went to stdout."""
    if json_path is not None:
        emit_json(doc, json_path)
    if json_path is None or str(json_path) != "-":
        show(renderable)


def console() -> Console:
    """The Console reports print on (stdout)."""
    return Console(highlight=False)


def show(renderable: RenderableType) -> None:
    console().print(renderable)


def emit_json(doc: dict[str, object], path: Path | None) -> None:
    """Write `doc` to `path`, or to stdout when `path` is '-' or None."""
    if path is None or str(path) == "-":
        sys.stdout.write(documents.dumps(doc) + "\n")
    else:
        documents.write(path, doc)
        print(f"wrote {path}", file=sys.stderr)
