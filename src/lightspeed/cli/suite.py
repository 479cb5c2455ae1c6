"""`lightspeed suite`: the built-in workloads."""

from __future__ import annotations

from lightspeed.cli.common import show


def suite_command() -> None:
    """List the built-in benchmark workloads a target can name."""
    from rich.table import Table

    from lightspeed import suite

    table = Table(title="Built-in workloads", title_justify="left")
    table.add_column("name")
    table.add_column("what it is")
    for name in suite.names():
        table.add_row(name, suite.describe(name))
    show(table)
