"""`lightspeed trace PATH…`: diagnose what bounds the steps of profiler traces."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import JsonOption, report


def trace_command(
    paths: list[Path] = typer.Argument(
        ..., help="Trace files (.json, .json.gz) or directories of per-rank traces."
    ),
    step: int | None = typer.Option(None, "--step", help="Detail ProfilerStep#N."),
    json_path: Path | None = JsonOption,
) -> None:
    """Read torch.profiler (Kineto) traces and say what bounds each step, with evidence."""
    from lightspeed import trace
    from lightspeed.report.trace_report import trace_document

    analysis = trace.analyse(paths)
    report(trace_document(analysis, step=step), json_path)
