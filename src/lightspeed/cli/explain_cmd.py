"""`lightspeed explain [TERM]`: what a label, column or title of the reports means."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import JsonOption, report


def explain_command(
    term: list[str] = typer.Argument(
        None,
        metavar="TERM",
        help="A label, column or title as a report prints it (several words are one term);"
        " none lists every term.",
        show_default=False,
    ),
    json_path: Path | None = JsonOption,
) -> None:
    """What a term of lightspeed's reports means, as lightspeed computes it."""
    from lightspeed import glossary
    from lightspeed.errors import UnknownNameError
    from lightspeed.report.glossary_report import entry_document, glossary_document

    if not term:
        report(glossary_document(glossary.sorted_entries()), json_path)
        return
    text = " ".join(term)
    entry = glossary.lookup(text)
    if entry is None:
        close = glossary.close_matches(text)
        guess = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ":"
        raise UnknownNameError(
            f"no glossary entry for {text!r}{guess} `lightspeed explain` lists every term."
        )
    report(entry_document(entry), json_path)
