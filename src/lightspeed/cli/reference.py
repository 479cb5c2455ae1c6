"""The command-line reference, `docs/cli.md`: every command's and subcommand's `--help`,
as the CLI prints it, wrapped at `WIDTH` columns whatever the terminal.

`python -m lightspeed.cli.reference > docs/cli.md` writes it (`REGENERATE`); a test
keeps the file equal to `markdown()`, so the page changes with the commands' help.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import typer.main

from lightspeed.cli import app

# The command that writes docs/cli.md, from the repository root.
REGENERATE = ".venv/bin/python -m lightspeed.cli.reference > docs/cli.md"
# Columns the help is wrapped at: the docs' line length.
WIDTH = 100


def contexts(command: Any, name: str, parent: Any = None) -> Iterator[Any]:
    """A click context for `command` (named `name` under `parent`) and, depth first in
    the CLI's own order, for each command under it."""
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    ctx = command.context_class(command, info_name=name, parent=parent, **settings)
    yield ctx
    for sub in command.list_commands(ctx) if hasattr(command, "list_commands") else ():
        yield from contexts(command.get_command(ctx, sub), sub, ctx)


def anchor(path: str) -> str:
    """The anchor a Markdown renderer gives the heading `path` ('lightspeed hw list' →
    'lightspeed-hw-list')."""
    return path.replace(" ", "-")


def markdown() -> str:
    """The reference as Markdown: a contents list, then each command's help verbatim."""
    root = typer.main.get_command(app)
    found = [(ctx.command_path, ctx.command.get_help(ctx)) for ctx in contexts(root, "lightspeed")]
    parts = [
        "# Command-line reference\n",
        "Every command's `--help`, as `lightspeed` prints it. This page is generated from the\n"
        "commands themselves; after changing one, write it again from the repository root with\n"
        f"`{REGENERATE}`\n(a test fails while it is out of date).\n",
        "\n".join(f"- [`{path}`](#{anchor(path)})" for path, _ in found) + "\n",
    ]
    for path, text in found:
        parts.append(f"## {path}\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def main() -> None:
    """Write the reference on stdout, as UTF-8 whatever the locale."""
    sys.stdout.buffer.write(markdown().encode("utf-8"))


if __name__ == "__main__":
    main()
