"""`lightspeed loadgen URL|TARGET`: open-loop load, latency from each request's scheduled
time, goodput under an SLO, and the highest rate that keeps it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from lightspeed.cli.common import DeviceOption, DtypeOption, HtmlOption, JsonOption
from lightspeed.cli.serve_cmd import (
    BatchTimeoutOption,
    MaxBatchOption,
    ProfileOption,
    ServeThreadsOption,
)


def loadgen_command(
    target: str = typer.Argument(
        ...,
        metavar="URL|TARGET",
        help="An HTTP endpoint (a lightspeed server's URL, or any POST endpoint with"
        " --body), or a workload (suite name, file.py:NAME, hf:…) to serve in this process.",
    ),
    rate: float = typer.Option(
        ...,
        "--rate",
        metavar="R",
        help="Requests a second (with --find-max-rate: the first guess).",
    ),
    duration: float = typer.Option(
        10.0, "--duration", metavar="SECONDS", help="Seconds of arrivals at each rate."
    ),
    slo: str = typer.Option(
        "50ms", "--slo", metavar="DURATION", help="Latency SLO: 50ms, 0.1s (bare number: ms)."
    ),
    arrivals: str = typer.Option(
        "poisson",
        "--arrivals",
        metavar="poisson|gamma:CV|trace.csv",
        help="Arrival process: Poisson; gamma gaps with coefficient of variation CV (> 1:"
        " bursty); or a CSV of arrival times in seconds (used as is, --rate ignored).",
    ),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the arrivals."),
    find_max_rate: bool = typer.Option(
        False,
        "--find-max-rate",
        help="Search for the highest rate with ≥ 99 % of requests within the SLO (drops"
        " count as misses), doubling, halving and bisecting from --rate.",
    ),
    body: Path | None = typer.Option(
        None, "--body", metavar="FILE", help="Request body to send (default: GET /sample)."
    ),
    content_type: str = typer.Option(
        "application/x-npy",
        "--content-type",
        metavar="TYPE",
        help="The body's content type: application/x-npy or application/json.",
    ),
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Allow a URL beyond this machine (loopback otherwise)."
    ),
    max_in_flight: int = typer.Option(
        1024,
        "--max-in-flight",
        metavar="N",
        help="Requests outstanding at once; more wait, their latency still counted from"
        " their scheduled time.",
    ),
    max_batch: int | None = MaxBatchOption,
    batch_timeout: str | None = BatchTimeoutOption,
    threads: int = ServeThreadsOption,
    profile_path: Path | None = ProfileOption,
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
) -> None:
    """Drive a server (or a workload served in process) with open-loop arrivals for a
    while: p50/p90/p99 from each request's scheduled time, throughput, goodput (requests
    within the SLO; drops count as misses), and the generator's own CPU use and lag."""
    from lightspeed.cli.common import emit_partial, report, use_threads
    from lightspeed.errors import LightspeedError
    from lightspeed.report.loadtest_report import loadtest_document
    from lightspeed.serving import load
    from lightspeed.units import parse_duration

    slo_s = parse_duration(slo)
    settings = load.LoadSettings(
        rate_per_s=rate,
        duration_s=duration,
        slo_s=slo_s,
        arrivals=arrivals,
        seed=seed,
        find_max_rate=find_max_rate,
        max_in_flight=max_in_flight,
    )
    settings.schedule(rate)  # refuses a bad --arrivals before anything starts
    if load.is_url(target):
        from lightspeed.serving import require

        require("aiohttp")
        from lightspeed.serving.loadgen import check_url

        url = load.endpoint(target)
        check_url(url, allow_remote)
        sent = load.read_body(body) if body else load.sample_body(url, content_type)
        run_at = load.http_run(url, sent, content_type, settings)
        described = {"url": url, "in_process": False, **load.server_info(url)}
    else:
        from lightspeed.serving.serve import ServeSettings, prepare
        from lightspeed.workflows.serve_plan import read_latency

        use_threads(threads)
        prepared = prepare(
            target,
            ServeSettings(
                slo_s=slo_s,
                max_batch=max_batch,
                timeout_s=None if batch_timeout is None else parse_duration(batch_timeout),
            ),
            device=device,
            dtype=dtype,
            profile=None if profile_path is None else read_latency(profile_path),
        )
        run_at = load.in_process_run(prepared, settings)
        described = {"url": None, "in_process": True, **prepared.info()}
    finished: list[Any] = []
    try:
        runs, found = load.drive(run_at, settings, finished)
    except (KeyboardInterrupt, LightspeedError):
        # the runs that ended before it are still written
        if finished:
            data = load.load_data(described, settings, finished, None)
            emit_partial(loadtest_document(data), json_path, html_path, None)
        raise
    report(
        loadtest_document(load.load_data(described, settings, runs, found)),
        json_path,
        html_path=html_path,
    )
