"""`lightspeed report RESULT.json`: draw a saved result as an HTML report or a PNG."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import JsonOption, report


def report_command(
    result: Path = typer.Argument(
        ...,
        metavar="RESULT.json",
        help="A result written with --json by lightspeed profile, trace, bench, tune or sweep.",
        show_default=False,
    ),
    html_path: Path | None = typer.Option(
        None,
        "--html",
        metavar="PATH",
        help="Where to write the interactive HTML report (default: RESULT.html beside the"
        " result, unless only --png is given).",
    ),
    png_path: Path | None = typer.Option(
        None,
        "--png",
        metavar="PATH",
        help="Where to write the roofline chart as a PNG image (needs matplotlib).",
    ),
    json_path: Path | None = JsonOption,
) -> None:
    """Draw a saved result (profile, trace, bench, tune or sweep JSON) as an interactive
    HTML report (by default RESULT.html beside it) and, with --png, its roofline as an
    image."""
    from lightspeed.cli.common import write_pictures
    from lightspeed.report.files_report import files_document
    from lightspeed.report.html import read_result

    doc = read_result(result)
    if html_path is None and png_path is None:
        html_path = result.with_suffix(".html")
    write_pictures(doc, html_path, png_path)
    report(files_document(result, str(doc["document"]), html_path, png_path), json_path)
