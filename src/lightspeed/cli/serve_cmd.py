"""`lightspeed serve TARGET --slo 50ms`: the model behind HTTP, batched under its SLO."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import DeviceOption, DtypeOption, HardwareOption, TargetArgument

SloOption = typer.Option(
    ...,
    "--slo",
    metavar="DURATION",
    help="Latency SLO each request is answered within: 50ms, 0.1s (a bare number is ms).",
)
MaxBatchOption = typer.Option(
    None,
    "--max-batch",
    metavar="N",
    help="Largest batch to run (1: batch-1 serving). Default: the plan's, the largest"
    " batch b with 2·ℓ(b) ≤ SLO.",
)
BatchTimeoutOption = typer.Option(
    None,
    "--batch-timeout",
    metavar="DURATION",
    help="Run a fixed policy instead of the SLO-aware one: a batch goes at --max-batch"
    " requests or once its oldest has waited this long (as LitServe's batch_timeout).",
)
ServeThreadsOption = typer.Option(
    1,
    "--threads",
    metavar="N",
    help="Threads torch runs each op on. One leaves the other cores to the HTTP side and"
    " a load generator.",
)
ProfileOption = typer.Option(
    None,
    "--profile",
    metavar="PATH",
    help="A `lightspeed serve-profile --json` result to plan with, instead of timing ℓ(b)"
    " at start.",
)


def serve_command(
    target: str = TargetArgument,
    slo: str = SloOption,
    port: int = typer.Option(8000, "--port", metavar="N", help="Port to listen on (0: any free)."),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        metavar="HOST",
        help="Address to listen on; 0.0.0.0 serves the network, not only this machine.",
    ),
    margin: str | None = typer.Option(
        None,
        "--margin",
        metavar="DURATION",
        help="Part of the SLO kept for reading and answering requests, the network and the"
        " event loop's delays: batches are planned to be done this much before each"
        " deadline. Default: a fifth of the SLO.",
    ),
    max_batch: int | None = MaxBatchOption,
    batch_timeout: str | None = BatchTimeoutOption,
    max_queue: int | None = typer.Option(
        None,
        "--max-queue",
        metavar="N",
        help="Requests that may wait; more are refused with 429 before their bodies are read."
        " Default: what the largest batch serves within the SLO less its margin.",
    ),
    max_body: str | None = typer.Option(
        None,
        "--max-body",
        metavar="SIZE",
        help="Largest request body (413 above it): 1MiB. Default: 8 samples' JSON, at least 1 MiB.",
    ),
    request_start: bool = typer.Option(
        True,
        "--request-start/--no-request-start",
        help="Count a request's deadline from its X-Request-Start header (Unix time, as"
        " load balancers and `lightspeed loadgen` set it) when it has one, so time spent"
        " before the server read it counts. Off when the sender's clock is not this"
        " machine's.",
    ),
    threads: int = ServeThreadsOption,
    profile_path: Path | None = ProfileOption,
    budget: float = typer.Option(
        0.3,
        "--budget",
        metavar="SECONDS",
        help="Seconds to time the forward at each batch size at start.",
    ),
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    hardware: str | None = HardwareOption,
) -> None:
    """Serve a workload's model over HTTP (POST /predict, GET /health, /metrics, /sample)
    with an SLO-aware batcher: each batch runs when waiting longer would make its oldest
    request miss the SLO; requests that can no longer make it are refused at once (503).
    The model runs in a worker process of its own. SIGTERM or Ctrl-C drains: every
    accepted request is answered."""
    import sys

    from lightspeed.cli.common import use_threads
    from lightspeed.serving import require

    require("starlette", "uvicorn", "prometheus_client")
    from lightspeed.serving.serve import ServeSettings, serve
    from lightspeed.serving.worker import prepare_worker
    from lightspeed.units import parse_duration, parse_size

    use_threads(threads)
    settings = ServeSettings(
        slo_s=parse_duration(slo),
        margin_s=None if margin is None else parse_duration(margin),
        max_batch=max_batch,
        timeout_s=None if batch_timeout is None else parse_duration(batch_timeout),
        max_queue=max_queue,
        max_body_bytes=None if max_body is None else parse_size(max_body),
        budget_s=budget,
        request_start=request_start,
    )
    latency = None
    if profile_path is not None:
        from lightspeed.workflows.serve_plan import read_latency

        latency = read_latency(profile_path)

    def progress(text: str) -> None:
        print(f"lightspeed: {text}", file=sys.stderr, flush=True)

    # The model runs in a process of its own, on `threads` threads (serving.worker).
    prepared = prepare_worker(
        target,
        settings,
        device=device,
        dtype=dtype,
        hardware=hardware,
        profile=latency,
        threads=threads,
        progress=progress,
    )

    def announce(url: str) -> None:
        print(
            f"lightspeed: serving {prepared.engine.name} at {url}/predict;"
            f" {prepared.describe()}. Ctrl-C or SIGTERM drains and stops.",
            flush=True,
        )

    serve(prepared, host=host, port=port, announce=announce, on_stop=progress)
