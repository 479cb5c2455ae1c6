"""The docs stay true to the code: `docs/cli.md` is the commands' own help, the README
stays a front page whose commands exist, and every page is wrapped and links to pages and
headings that exist."""

from __future__ import annotations

import re
import shlex
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


# The pages written by hand; glossary.md is one generated entry a line, benchmarks.md a log.
HAND_WRITTEN = (
    ROOT / "README.md",
    *sorted(p for p in DOCS.glob("*.md") if p.name not in {"glossary.md", "benchmarks.md"}),
)
WIDTH = 100
README_LINES = 200
FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def outside_code(path: Path) -> Iterator[str]:
    """The lines of a Markdown file outside its fenced code blocks."""
    fenced = False
    for line in path.read_text("utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield line


def code_lines(path: Path) -> Iterator[str]:
    """The lines of a Markdown file inside its fenced code blocks."""
    fenced = False
    for line in path.read_text("utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            yield line.strip()


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading ("The device's time" → "the-devices-time")."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in outside_code(path) if line.startswith("#")}


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text("utf-8").splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    assert "make demo    # creates .venv" in lines[lines.index("```") + 1]


def test_docs_are_wrapped() -> None:
    long = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in HAND_WRITTEN
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if len(line) > WIDTH
    ]
    assert long == [], f"lines over {WIDTH} columns: {long}"


def test_links_between_pages_resolve() -> None:
    broken = []
    for path in HAND_WRITTEN:
        for line in outside_code(path):
            for link in LINK.findall(line):
                if link.startswith(("http://", "https://")):
                    continue
                target, _, anchor = link.partition("#")
                page = (path.parent / target).resolve() if target else path
                if not page.exists():
                    broken.append(f"{path.name}: {link} (no such file)")
                elif anchor and page.suffix == ".md" and anchor not in anchors(page):
                    broken.append(f"{path.name}: {link} (no such heading)")
    assert broken == []


def options_of(command: Any) -> set[str]:
    return {opt for param in command.params for opt in getattr(param, "opts", ())}


def test_readme_commands_name_real_commands_and_options() -> None:
    root = typer.main.get_command(app)
    wrong = []
    lines = [c for c in code_lines(ROOT / "README.md") if c.startswith("lightspeed ")]
    assert len(lines) >= 8  # the six-command loop's
    for line in lines:
        command, words = root, shlex.split(line.split("#")[0])[1:]
        while words and words[0] in getattr(command, "commands", {}):
            command = command.commands[words.pop(0)]
        unknown = {w.split("=")[0] for w in words if w.startswith("--")} - options_of(command)
        if command is root or unknown:
            wrong.append(f"{line}: {sorted(unknown) or 'no command'}")
    assert wrong == []


PATH_IN_CODE = re.compile(r"`([\w./{}-]+(?:/|\.py|\.toml|\.txt|\.md))`")
NAME_AFTER_MODULE = re.compile(r"\]\(([^)\s]+\.py)\)\s+`(\w+)`")


def test_paths_the_docs_name_exist() -> None:
    """A path in backticks names a file or folder of the repository or of the package
    (`measure/step.py`); one with a placeholder (`*_report.py`) is a pattern, not a path."""
    package = ROOT / "src" / "lightspeed"
    missing = [
        f"{path.name}: {name}"
        for path in HAND_WRITTEN
        for line in outside_code(path)
        for name in PATH_IN_CODE.findall(line)
        if not re.search(r"[*{]|[A-Z]{2,}", name)
        and not any((base / name).exists() for base in (ROOT, package, DOCS))
    ]
    assert missing == []


def test_functions_named_after_a_module_are_in_it() -> None:
    """`[`measure/step.py`](…) `prepare``: the module defines `prepare`."""
    wrong = []
    for path in HAND_WRITTEN:
        text = "\n".join(outside_code(path))
        for link, name in NAME_AFTER_MODULE.findall(text):
            source = (path.parent / link).read_text("utf-8")
            if not re.search(rf"^(def|class) {name}\b|^{name}\b.*=", source, re.MULTILINE):
                wrong.append(f"{path.name}: {link} has no {name}")
    assert wrong == []
