"""The report of `lightspeed report`: which result was drawn, and the files written."""

from __future__ import annotations

from pathlib import Path

from lightspeed.document import Document, Fields, Section, line

DOCUMENT = "report"


def files_document(
    source: Path, kind: str, html_path: Path | None, png_path: Path | None
) -> Document:
    """What `lightspeed report` drew: the result (`kind`, its `document`) and the HTML
    report and roofline image it wrote (None: not asked for)."""
    rows = [("result", line(f"{source} ({kind})"))]
    if html_path is not None:
        rows.append(("HTML report", line(str(html_path))))
    if png_path is not None:
        rows.append(("roofline image", line(str(png_path))))
    return Document(
        kind=DOCUMENT,
        data={
            "source": str(source),
            "result_document": kind,
            "html": None if html_path is None else str(html_path),
            "png": None if png_path is None else str(png_path),
        },
        sections=(Section("Report", (Fields(tuple(rows)),)),),
    )
