"""Options and helpers every command shares."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console, RenderableType

from lightspeed.report import json_report

DEVICE_HELP = "Where to run: cpu or cuda."
DTYPE_HELP = "Precision of the step: fp32, bf16 or fp16 (parameters, activations and batch)."
HARDWARE_HELP = "Hardware to model on: a catalog id (see `lightspeed hw list`) or 'local'."

DeviceOption = typer.Option("cpu", "--device", help=DEVICE_HELP)
DtypeOption = typer.Option("fp32", "--dtype", help=DTYPE_HELP)


def console() -> Console:
    """The Console reports print on (stdout)."""
    return Console(highlight=False)


def show(renderable: RenderableType) -> None:
    console().print(renderable)


def emit_json(doc: dict[str, object], path: Path | None) -> None:
    """Write `doc` to `path`, or to stdout when `path` is '-' or None."""
    if path is None or str(path) == "-":
        sys.stdout.write(json_report.dumps(doc) + "\n")
    else:
        json_report.write(path, doc)
        print(f"wrote {path}", file=sys.stderr)
