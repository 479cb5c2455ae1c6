"""`lightspeed history [NAME]` and `lightspeed compare [RUN_A] [RUN_B]`: the bench runs
the results store keeps, and two of them compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from lightspeed.cli.common import JsonOption, WideOption, report

StoreOption = typer.Option(
    None,
    "--store",
    metavar="PATH",
    help="The results store (default: history.sqlite in lightspeed's data directory,"
    " $LIGHTSPEED_DATA_DIR or ~/.local/share/lightspeed).",
)

# Exit status of `compare --fail-on-regression` when a workload regressed.
EXIT_REGRESSION = 1


def history_command(
    name: str | None = typer.Argument(
        None, metavar="[NAME]", help="A workload: its results across runs.", show_default=False
    ),
    store: Path | None = StoreOption,
    json_path: Path | None = JsonOption,
    wide: bool = WideOption,
) -> None:
    """List the bench runs the results store keeps, or one workload's results across them."""
    from lightspeed import history
    from lightspeed.report.history_report import runs_document, workload_history_document

    path = store or history.default_store()
    if name is None:
        doc = runs_document(history.runs(path), str(path))
    else:
        doc = workload_history_document(name, history.workload_history(path, name), str(path))
    report(doc, json_path, wide=wide)


def compare_command(
    run_a: str | None = typer.Argument(
        None,
        metavar="[RUN_A]",
        help="A run id of the store or a bench JSON file (default: the run before RUN_B).",
        show_default=False,
    ),
    run_b: str | None = typer.Argument(
        None,
        metavar="[RUN_B]",
        help="A run id or a bench JSON file (default: the store's last run).",
        show_default=False,
    ),
    baseline: Path | None = typer.Option(
        None,
        "--baseline",
        metavar="FILE.json",
        help="Compare the last run (or RUN_A) against this bench JSON (for CI, where the"
        " store starts empty).",
    ),
    threshold: float = typer.Option(
        5.0, "--threshold", metavar="PERCENT", help="Smallest change that counts, in percent."
    ),
    fail_on_regression: bool = typer.Option(
        False,
        "--fail-on-regression",
        help=f"Exit with status {EXIT_REGRESSION} when a workload got slower beyond the"
        " threshold and the noise (never for runs of different machines or thread counts,"
        " nor for a workload whose noise check failed in either run: not judged).",
    ),
    store: Path | None = StoreOption,
    json_path: Path | None = JsonOption,
    wide: bool = WideOption,
) -> None:
    """Compare two bench runs workload by workload: a regression must exceed both the
    threshold and the noise measured between the runs' rounds."""
    from lightspeed import history
    from lightspeed.analysis.bench_compare import compare_runs
    from lightspeed.errors import ConfigError
    from lightspeed.report.history_report import compare_document

    if threshold < 0:
        raise ConfigError(f"--threshold {threshold} must be 0 or more (percent).")
    path = store or history.default_store()
    if baseline is not None:
        if run_b is not None:
            raise ConfigError("--baseline takes the place of RUN_A: give at most one run.")
        a, b = _load_json(baseline), _run(path, run_a)
    elif run_a is not None and run_b is not None:
        a, b = _run(path, run_a), _run(path, run_b)
    else:
        ids = history.last_run_ids(path, 2)
        if run_a is not None:  # one run given: against the last
            a, b = _run(path, run_a), history.run_document(path, ids[-1] if ids else None)
        elif len(ids) < 2:
            raise ConfigError(
                f"{path} holds {len(ids)} run(s); compare needs two, or --baseline FILE.json."
            )
        else:
            a, b = history.run_document(path, ids[0]), history.run_document(path, ids[1])
    comparison = compare_runs(a, b, threshold / 100)
    report(compare_document(comparison, _label(a), _label(b)), json_path, wide=wide)
    if fail_on_regression and comparison.fails:
        raise typer.Exit(EXIT_REGRESSION)


def _run(path: Path, which: str | None) -> dict[str, Any]:
    """A run of the store by id (None: the last), or a bench JSON file by path."""
    from lightspeed import history

    if which is None:
        return history.run_document(path)
    if which.isdigit():
        return history.run_document(path, int(which))
    return _load_json(Path(which))


def _load_json(path: Path) -> dict[str, Any]:
    import json

    from lightspeed.errors import ConfigError

    try:
        document: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such file; give a run id or a bench JSON file.") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a bench JSON file ({exc}).") from exc
    if document.get("document") != "bench":
        raise ConfigError(
            f"{path} is a {document.get('document')!r} document, not a bench; write one with"
            " `lightspeed bench … --json PATH`."
        )
    document.setdefault("label", str(path))
    return document


def _label(document: dict[str, Any]) -> str:
    if "run_id" in document:
        return f"run {document['run_id']}"
    return str(document.get("label", "baseline"))
