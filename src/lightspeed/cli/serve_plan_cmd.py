"""`lightspeed serve-plan SESSIONS.toml`: the GPUs a set of models needs under latency
SLOs, the plan checked by simulating it and, with `--run`, by running it for real."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import HtmlOption, JsonOption, report


def serve_plan_command(
    sessions_path: Path = typer.Argument(
        ...,
        metavar="SESSIONS.toml",
        help="[[session]] tables: name, latency (a serve-profile --json result), rate"
        " (requests/s), slo_ms, and target (a suite name or file.py:NAME) to --run.",
    ),
    simulate_s: float = typer.Option(
        60.0, "--simulate", metavar="SECONDS", help="Seconds of arrivals to simulate."
    ),
    run_s: float | None = typer.Option(
        None,
        "--run",
        metavar="SECONDS",
        help="Also run the plan for real for SECONDS of arrivals: a single-thread CPU"
        " worker process for each GPU, each session's target model on it.",
    ),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the arrivals."),
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
) -> None:
    """Plan GPUs for models served under latency SLOs (Nexus's batching and bin packing)
    from their latency profiles, and check the plan by simulating it (and, with --run,
    by running it on CPU worker processes standing for the GPUs)."""
    from lightspeed.errors import ConfigError
    from lightspeed.predict.serving import one_model_per_gpu, plan, simulate
    from lightspeed.report.serving_report import plan_document
    from lightspeed.workflows.serve_plan import read_sessions, read_targets

    if not simulate_s > 0:
        raise ConfigError(f"--simulate {simulate_s} must be a positive number of seconds.")
    if run_s is not None and not run_s > 0:
        raise ConfigError(f"--run {run_s} must be a positive number of seconds.")
    sessions = read_sessions(sessions_path)
    targets = read_targets(sessions_path) if run_s is not None else {}
    served = plan(sessions)
    outcomes = simulate(served, sessions, duration_s=simulate_s, seed=seed)
    measured = None
    if run_s is not None:
        from lightspeed.serving.plan_run import run_plan

        measured = run_plan(served, sessions, targets, duration_s=run_s, seed=seed)
    doc = plan_document(
        sessions,
        served,
        outcomes,
        one_model_per_gpu(sessions),
        simulate_s,
        measured=measured,
        run_s=run_s,
    )
    report(doc, json_path, html_path=html_path)
