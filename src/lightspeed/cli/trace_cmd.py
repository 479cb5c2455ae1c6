"""`lightspeed trace PATH…`: diagnose what bounds the steps of profiler traces."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import (
    HtmlOption,
    JsonOption,
    LogDirOption,
    LogOption,
    PngOption,
    WideOption,
    emit_partial,
    report,
)


def trace_command(
    paths: list[Path] = typer.Argument(
        ...,
        metavar="PATH",
        help="Trace files (.json, .json.gz) or directories of per-rank traces.",
        show_default=False,
    ),
    step: int | None = typer.Option(None, "--step", metavar="N", help="Detail ProfilerStep#N."),
    include_last_step: bool = typer.Option(
        False,
        "--include-last-step",
        help="Count the last ProfilerStep in the whole-trace figures (left out by default,"
        " as HolisticTraceAnalysis does: it is often cut short).",
    ),
    executor: str = typer.Option(
        "local",
        "--executor",
        metavar="local|dask[=ADDRESS]",
        help="Where several ranks are read and analysed: local (a pool of processes here,"
        " sized by the cores and the memory), dask (a local Dask cluster) or"
        " dask=tcp://HOST:PORT (the cluster of that scheduler; its workers must see the"
        " files). Needs `pip install 'lightspeed[dask]'` for dask.",
    ),
    max_memory: str | None = typer.Option(
        None,
        "--max-memory",
        metavar="SIZE",
        help="The memory the analysis may take (8GB, 512MiB; default: what the machine has"
        " available): a trace estimated to need more is refused before it is read, and"
        " ranks are read in as many processes as it holds.",
    ),
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
    png_path: Path | None = PngOption,
    wide: bool = WideOption,
    log: str | None = LogOption,
    log_dir: Path = LogDirOption,
) -> None:
    """Read torch.profiler (Kineto) traces and say what bounds each step, with evidence."""
    from lightspeed import trace
    from lightspeed.errors import ConfigError, TraceError
    from lightspeed.report.steps_shown import step_numbers
    from lightspeed.report.trace_report import trace_document
    from lightspeed.units import parse_size

    limit = None if max_memory is None else parse_size(max_memory)
    try:
        analysis = trace.analyse(
            paths,
            include_last_step=include_last_step,
            timeline_step=step,
            executor=executor,
            max_memory_bytes=limit,
        )
    except MemoryError:
        raise TraceError(
            "ran out of memory reading and analysing the traces; give fewer ranks at once,"
            " or analyse them on a machine with more memory (--executor dask=ADDRESS)."
        ) from None
    recorded = sorted({n for r in analysis.ranks for n in r.steps.numbers if n is not None})
    if step is not None and step not in recorded:
        # What was analysed is still written.
        emit_partial(trace_document(analysis), json_path, html_path, png_path)
        steps = step_numbers(recorded) or "none: the trace has no ProfilerStep#N"
        raise ConfigError(
            f"--step {step}: no ProfilerStep#{step} in the trace; its steps: {steps}."
        )
    from lightspeed.trace.load import no_cycle_collection

    with no_cycle_collection():  # a long trace's steps are made again to be written
        report(
            trace_document(analysis, step=step),
            json_path,
            wide=wide,
            html_path=html_path,
            png_path=png_path,
            log=log,
            log_dir=log_dir,
        )
