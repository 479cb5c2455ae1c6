"""The docs stay true to the code: `docs/cli.md` is the commands' own help."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main

from lightspeed.cli import app, reference

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"


def test_cli_reference_is_the_commands_help() -> None:
    assert (DOCS / "cli.md").read_text("utf-8") == reference.markdown(), (
        f"docs/cli.md is out of date: run `{reference.REGENERATE}` from the repository root"
    )


def command_paths(command: Any, path: str) -> Iterator[str]:
    """`path` and every command under `command`, as 'lightspeed hw show'."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from command_paths(sub, f"{path} {name}")


def test_cli_reference_has_a_section_for_every_command() -> None:
    text = (DOCS / "cli.md").read_text("utf-8")
    paths = list(command_paths(typer.main.get_command(app), "lightspeed"))
    assert "lightspeed hw calibrate" in paths
    assert [p for p in paths if f"\n## {p}\n\n```text\nUsage: {p} " not in text] == []
