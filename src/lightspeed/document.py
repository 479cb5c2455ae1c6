"""The document model every report is built as, once: what the terminal, JSON and HTML
renderers (`report/render_*`) draw, and what an analysis describes of its results.

A `Document` holds the report's `data` (the JSON body: numbers in the units their
keys name) and its `sections` as a reader sees them: fields, tables, trees,
findings and notes. Cells hold raw values with a `Unit`, never preformatted text, so
each renderer formats them its own way (the terminal with SI prefixes, HTML with
sortable raw numbers beside the text). Nothing here imports rich.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lightspeed import units
from lightspeed.rules import Finding


class Unit(str, enum.Enum):
    """How a raw value reads: the unit it is in and the way it is shown."""

    TEXT = "text"
    SECONDS = "s"
    BYTES = "B"
    FRACTION = "fraction"  # shown as a percentage
    FLOPS = "FLOP"
    FLOP_RATE = "FLOP/s"
    BYTE_RATE = "B/s"
    COUNT = "count"  # with an SI prefix: 1.2 M
    INTEGER = "integer"
    NUMBER = "number"  # shown with the Value's `spec`


class Style(str, enum.Enum):
    """Emphasis a renderer may draw (or not)."""

    PLAIN = "plain"
    BOLD = "bold"
    WARNING = "warning"
    ERROR = "error"


@dataclasses.dataclass(frozen=True)
class Value:
    """One raw value in a unit; `spec` formats a NUMBER (`",.1f"`), `suffix` follows it."""

    raw: float | int | str | None
    unit: Unit = Unit.TEXT
    spec: str = ""
    suffix: str = ""
    style: Style = Style.PLAIN


# How each unit reads: SI prefixes for rates and counts, binary for sizes.
_FORMATS: dict[Unit, Callable[[float], str]] = {
    Unit.SECONDS: units.seconds,
    Unit.BYTES: units.size,
    Unit.FRACTION: units.percent,
    Unit.FLOPS: lambda v: units.count(v, "FLOP"),
    Unit.FLOP_RATE: units.flops_rate,
    Unit.BYTE_RATE: units.byte_rate,
    Unit.COUNT: units.count,
    Unit.INTEGER: lambda v: str(int(v)),
}


def format_value(v: Value) -> str:
    """The text of one value, with its unit's prefix and `suffix` (the same in the
    terminal and in HTML)."""
    raw = v.raw
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return "—"
    if isinstance(raw, str) or v.unit is Unit.TEXT:
        return str(raw) + v.suffix
    formatter = _FORMATS.get(v.unit)
    text = formatter(raw) if formatter is not None else format(raw, v.spec)
    return text + v.suffix


# A line of text: plain strings and values, read left to right.
Span = str | Value
Line = tuple[Span, ...]


def line(*spans: Span) -> Line:
    """A Line of `spans`."""
    return tuple(spans)


@dataclasses.dataclass(frozen=True)
class Fields:
    """Label → line rows, a short summary grid."""

    rows: tuple[tuple[str, Line], ...]
    title: str | None = None


@dataclasses.dataclass(frozen=True)
class Column:
    """A table column: `key` names its values in the table's rows (and in HTML),
    `header` is what a reader sees; names that may be long `shrink` (a narrow terminal
    shows them cut in the middle, never two alike; `abbreviate` gives a shorter form a
    terminal may show, such as a kernel name without its template arguments), figures
    keep at least `min_width`; an `optional` column (a detail) is left out of a terminal
    too narrow for it."""

    key: str
    header: str
    numeric: bool = False
    shrink: bool = False
    min_width: int | None = None
    abbreviate: Callable[[str], str] | None = None
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class Table:
    """Rows of cells under columns; the last `bold_rows` rows are totals."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Span, ...], ...]
    caption: str | None = None
    bold_rows: int = 0
    framed: bool = False  # drawn with a light outline rather than a rule under the header

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: a row of {len(row)} cells")


@dataclasses.dataclass(frozen=True)
class Tree:
    """A labelled node with children (a module tree)."""

    label: Line
    children: tuple[Tree, ...] = ()


@dataclasses.dataclass(frozen=True)
class Findings:
    """Findings under a title, each with the most its fix can gain."""

    findings: tuple[Finding, ...]
    title: str = "Findings"
    empty: str = "none."


@dataclasses.dataclass(frozen=True)
class Notes:
    """Plain lines under a title (what could not be analysed, warnings)."""

    lines: tuple[str, ...]
    title: str | None = None
    style: Style = Style.PLAIN


Block = Fields | Table | Tree | Findings | Notes


@dataclasses.dataclass(frozen=True)
class Section:
    """A titled part of a report; `framed` sections are drawn in a box."""

    title: str | None
    blocks: tuple[Block | Section, ...]
    framed: bool = True


@dataclasses.dataclass(frozen=True)
class Document:
    """A report: what it is (`kind`, the JSON `document` name), its JSON body `data`,
    its sections in reading order, and the reasons not to trust its figures as they
    stand (`warnings`), which every renderer shows: the terminal under "Warnings", the
    JSON as its top-level `warnings`."""

    kind: str
    data: Mapping[str, Any]
    sections: tuple[Section | Block, ...]
    warnings: tuple[str, ...] = ()

    def warned(self, *warnings: str) -> Document:
        """This document with `warnings` added before its own (repeats dropped)."""
        merged = tuple(dict.fromkeys((*warnings, *self.warnings)))
        return dataclasses.replace(self, warnings=merged)


def findings_data(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """Findings as JSON objects: kind, message, evidence."""
    return [
        {"kind": f.kind.value, "message": f.message, "evidence": dict(f.evidence)} for f in findings
    ]
