"""`lightspeed bench [NAMES…|--all]`: the suite profiled and timed in interleaved rounds."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from lightspeed.cli.common import (
    BatchSizeOption,
    DeviceOption,
    DtypeOption,
    HardwareOption,
    HtmlOption,
    JsonOption,
    LogDirOption,
    LogOption,
    PngOption,
    ThreadsOption,
    WideOption,
    report,
    use_threads,
)
from lightspeed.cli.history_cmd import StoreOption


def bench_command(
    names: list[str] = typer.Argument(
        None,
        metavar="[NAMES]...",
        help="Suite workloads or families (see `lightspeed suite`); --all for every family.",
        show_default=False,
    ),
    every: bool = typer.Option(False, "--all", help="Every family of the suite."),
    size: str = typer.Option(
        "tiny",
        "--size",
        metavar="SIZE",
        help="tiny (each family's -tiny variant, a step of about a second or less on a"
        " CPU) or full (as published).",
    ),
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    batch_size: int | None = BatchSizeOption,
    hardware: str | None = HardwareOption,
    rounds: int = typer.Option(
        3,
        "--rounds",
        metavar="N",
        help="Interleaved rounds: each times every workload once more, so drift between"
        " minutes shows as a spread between rounds.",
    ),
    budget: float = typer.Option(
        1.0, "--budget", metavar="SECONDS", help="Seconds of timing per workload and round."
    ),
    retry_noisy: int = typer.Option(
        0,
        "--retry-noisy",
        metavar="[N]",
        help="Time again, up to N times (2 when no N is given), the rounds whose noise"
        " check failed (a busy machine, stolen CPU time, a canary that moved), keeping"
        " the quieter timing: `lightspeed compare` does not judge a change in a noisy"
        " workload.",
    ),
    threads: int | None = ThreadsOption,
    store: Path | None = StoreOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
    png_path: Path | None = PngOption,
    wide: bool = WideOption,
    log: str | None = LogOption,
    log_dir: Path = LogDirOption,
) -> None:
    """Profile the suite's workloads and time them in interleaved rounds: step time,
    throughput, fraction of the speed of light, MFU, peak memory, bound. The run is
    added to the results store (`lightspeed history`, `lightspeed compare`)."""
    from lightspeed import history
    from lightspeed.report import render_json
    from lightspeed.report.bench_report import bench_document
    from lightspeed.suite import get
    from lightspeed.workflows.bench import bench, bench_names
    from lightspeed.workflows.profile import run_setup

    path = store or history.default_store()
    history.check(path)  # a file that is no store is refused before any work
    use_threads(threads)
    chosen = bench_names(names or [], size, every)
    workloads = []
    settings = hw = None
    for name in chosen:
        workload, settings, hw = run_setup(get(name), device, dtype, batch_size, hw or hardware)
        workloads.append(workload)
    assert settings is not None and hw is not None
    run = bench(
        workloads,
        hw,
        settings,
        size=size,
        rounds=rounds,
        budget_s=budget,
        retry_noisy=retry_noisy,
    )
    document = bench_document(run)
    # Recorded first: a file that cannot be written loses no run.
    run_id = history.record(path, render_json.render(document))
    report(
        document,
        json_path,
        wide=wide,
        html_path=html_path,
        png_path=png_path,
        log=log,
        log_dir=log_dir,
    )
    print(f"recorded as run {run_id} in {path}", file=sys.stderr)
