"""`lightspeed suite`: the built-in workloads."""

from __future__ import annotations

from pathlib import Path

from lightspeed.cli.common import JsonOption, WideOption, report


def suite_command(json_path: Path | None = JsonOption, wide: bool = WideOption) -> None:
    """List the built-in benchmark workloads a target can name."""
    from lightspeed import suite
    from lightspeed.report.suite_report import suite_document

    report(
        suite_document([(name, suite.describe(name)) for name in suite.names()]),
        json_path,
        wide=wide,
    )
