"""`lightspeed serve-plan SESSIONS.toml`: the GPUs a set of models needs under latency
SLOs, and the plan checked by simulating it."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import HtmlOption, JsonOption, report


def serve_plan_command(
    sessions_path: Path = typer.Argument(
        ...,
        metavar="SESSIONS.toml",
        help="[[session]] tables: name, latency (a serve-profile --json result), rate"
        " (requests/s), slo_ms.",
    ),
    simulate_s: float = typer.Option(
        60.0, "--simulate", metavar="SECONDS", help="Seconds of arrivals to simulate."
    ),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the simulated arrivals."),
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
) -> None:
    """Plan GPUs for models served under latency SLOs (Nexus's batching and bin packing)
    from their latency profiles, and check the plan by simulating it."""
    from lightspeed.errors import ConfigError
    from lightspeed.predict.serving import one_model_per_gpu, plan, simulate
    from lightspeed.report.serving_report import plan_document
    from lightspeed.workflows.serve_plan import read_sessions

    if not simulate_s > 0:
        raise ConfigError(f"--simulate {simulate_s} must be a positive number of seconds.")
    sessions = read_sessions(sessions_path)
    served = plan(sessions)
    outcomes = simulate(served, sessions, duration_s=simulate_s, seed=seed)
    doc = plan_document(sessions, served, outcomes, one_model_per_gpu(sessions), simulate_s)
    report(doc, json_path, html_path=html_path)
