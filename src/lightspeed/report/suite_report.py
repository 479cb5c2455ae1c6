"""The built-in workloads as a `Document`: `lightspeed suite`."""

from __future__ import annotations

from collections.abc import Sequence

from lightspeed.document import Column, Document, Table


def suite_document(workloads: Sequence[tuple[str, str]]) -> Document:
    """(name, description) of each built-in workload, as a table."""
    table = Table(
        title="Built-in workloads",
        columns=(Column("name", "name"), Column("description", "what it is", shrink=True)),
        rows=tuple((name, text) for name, text in workloads),
    )
    data = {"workloads": [{"name": name, "description": text} for name, text in workloads]}
    return Document(kind="suite", data=data, sections=(table,))
