"""The glossary as a Document (`document: "glossary"`): every term with the other names
it goes by, or one term with its definition (`lightspeed explain [TERM]`). Its data is
`entries`, each a term, its aliases and its definition, in both cases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightspeed.document import Column, Document, Fields, Notes, Section, Table, line
from lightspeed.glossary import Entry

DOCUMENT = "glossary"


def _entry_data(entry: Entry) -> dict[str, Any]:
    return {"term": entry.term, "aliases": list(entry.aliases), "definition": entry.definition}


def glossary_document(entries: Sequence[Entry]) -> Document:
    """Every term of `entries` with its aliases, as a table; the definitions in the data."""
    table = Table(
        title="Glossary: `lightspeed explain TERM` defines one",
        columns=(Column("term", "term"), Column("aliases", "also", shrink=True)),
        rows=tuple((e.term, ", ".join(e.aliases)) for e in entries),
    )
    data = {"entries": [_entry_data(e) for e in entries]}
    return Document(kind=DOCUMENT, data=data, sections=(table,))


def entry_document(entry: Entry) -> Document:
    """One term: its definition, and the other names it goes by."""
    blocks: list[Notes | Fields] = [Notes((entry.definition,))]
    if entry.aliases:
        blocks.append(Fields((("also", line(", ".join(entry.aliases))),)))
    section = Section(entry.term, tuple(blocks))
    return Document(kind=DOCUMENT, data={"entries": [_entry_data(entry)]}, sections=(section,))
