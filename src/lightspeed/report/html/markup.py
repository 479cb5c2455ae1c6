"""The pieces an HTML report is made of: escaped text, a page that numbers its charts and
tables in the order they are added (so the same input gives the same ids), and the
blocks every report shares (fields, sortable tables, findings, notes).

Every string that reaches the page from a result (op, module and kernel names, paths,
messages) goes through `text()` or into the page's JSON through `script_json()`, so a
name such as `</script><script>…` is shown as the text it is. Plotly draws names in its
labels with a small HTML-like markup of its own; `label()` escapes them for it.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lightspeed.document import Unit, Value, format_value
from lightspeed.report.render_json import finite

Markup = str  # HTML that is already escaped


def text(value: object) -> Markup:
    """`value` as HTML text: every `<`, `>`, `&` and quote escaped."""
    return html.escape(str(value), quote=True)


def label(value: object) -> str:
    """`value` for a plotly label or hover text: plotly reads `<br>`, `<b>` and links in
    labels, so a name is escaped into entities that it shows as written."""
    return html.escape(str(value), quote=False)


def script_json(obj: Any) -> str:
    """`obj` as JSON safe inside a `<script>` element: no `<`, `>` or `&` appears, so no
    string in it can close the element or open a comment (JSON reads the \\u escapes
    back as the same characters)."""
    raw = json.dumps(finite(obj), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (
        raw.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@dataclasses.dataclass(frozen=True)
class Link:
    """A cell that links to an anchor of the page (`#anchor`)."""

    label: str
    anchor: str


Cell = Value | Link | str | None


def cell(value: Cell) -> tuple[Markup, str | None]:
    """A table cell's markup and, for a number, its raw value to sort by."""
    if value is None:
        return "—", None
    if isinstance(value, str):
        return text(value), None
    if isinstance(value, Link):
        return f'<a href="#{text(value.anchor)}">{text(value.label)}</a>', None
    raw = value.raw
    sort = None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw):
        sort = repr(float(raw))
    return text(format_value(value)), sort


@dataclasses.dataclass(frozen=True)
class Column:
    """A column of an HTML table: `numeric` columns sort by their raw values."""

    key: str
    header: str
    numeric: bool = False


@dataclasses.dataclass
class Page:
    """An HTML report being built: its sections in order and the charts they hold.

    `chart()` and `table()` number their elements in the order they are called (ids
    `ls-chart-1`, `ls-table-1`, …), so the same result gives the same page.
    """

    title: str
    sections: list[Markup] = dataclasses.field(default_factory=list)
    figures: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    nav: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (anchor, title)
    _tables: int = 0

    @property
    def last_chart_id(self) -> str:
        """The id of the chart added last."""
        return f"ls-chart-{len(self.figures)}"

    def chart(self, kind: str, figure: Mapping[str, Any], caption: str | None = None) -> Markup:
        """A placeholder the page's script draws `figure` (plotly's data, layout and
        config) into; `kind` names the chart for tests and styles."""
        chart_id = f"ls-chart-{len(self.figures) + 1}"
        self.figures[chart_id] = dict(figure)
        below = f'<p class="caption">{text(caption)}</p>' if caption else ""
        return (
            f'<figure><div class="ls-chart" id="{chart_id}" data-chart="{text(kind)}"></div>'
            f"{below}</figure>"
        )

    def table(
        self,
        columns: Sequence[Column],
        rows: Iterable[Sequence[Cell]],
        *,
        caption: str | None = None,
        filterable: bool = False,
        kind: str = "",
    ) -> Markup:
        """A table whose headers sort it (numbers by their raw value) and, when
        `filterable`, a box that keeps the rows containing what is typed."""
        self._tables += 1
        table_id = f"ls-table-{self._tables}"
        head = "".join(
            f'<th data-key="{text(c.key)}"{" class=num" if c.numeric else ""}>{text(c.header)}</th>'
            for c in columns
        )
        body = []
        for row in rows:
            cells = []
            for value in row:
                shown, sort = cell(value)
                attr = "" if sort is None else f' data-v="{sort}"'
                cells.append(f"<td{attr}>{shown}</td>")
            body.append(f"<tr>{''.join(cells)}</tr>")
        search = (
            f'<input class="ls-filter" type="search" data-table="{table_id}"'
            ' placeholder="filter rows" aria-label="filter rows">'
            if filterable
            else ""
        )
        note = f"<caption>{text(caption)}</caption>" if caption else ""
        return (
            f'{search}<div class="scroll"><table class="ls-table sortable" id="{table_id}"'
            f' data-table="{text(kind)}">{note}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )

    def section(self, title: str, *parts: Markup, anchor: str | None = None) -> None:
        """Add a titled section of `parts`; one with an `anchor` is in the navigation."""
        at = f' id="{text(anchor)}"' if anchor else ""
        if anchor:
            self.nav.append((anchor, title))
        self.sections.append(f"<section{at}><h2>{text(title)}</h2>{''.join(parts)}</section>")


def fields(rows: Iterable[tuple[str, Cell]], *, title: str | None = None) -> Markup:
    """Label → value rows, a summary grid."""
    items = "".join(f"<dt>{text(name)}</dt><dd>{cell(value)[0]}</dd>" for name, value in rows)
    head = f"<h3>{text(title)}</h3>" if title else ""
    return f'{head}<dl class="fields">{items}</dl>'


def findings(found: Sequence[Mapping[str, Any]], *, empty: str = "none.") -> Markup:
    """Findings as a list: kind, message, the most the fix can gain, and the evidence."""
    if not found:
        return f'<p class="empty">{text(empty)}</p>'
    items = []
    for f in found:
        evidence = {k: v for k, v in dict(f.get("evidence") or {}).items() if k != "max_speedup"}
        gain = (f.get("evidence") or {}).get("max_speedup")
        gain_text = ""
        if isinstance(gain, (int, float)) and math.isfinite(gain) and gain > 1.005:
            gain_text = f'<span class="gain">fixing it: at most {gain:.2f}× faster</span>'
        rows = "".join(
            f"<tr><th>{text(k)}</th><td>{text(_evidence_text(k, v))}</td></tr>"
            for k, v in evidence.items()
        )
        items.append(
            f'<li><span class="kind">{text(f.get("kind", ""))}</span> {text(f.get("message", ""))}'
            f"{gain_text}<details><summary>evidence</summary>"
            f'<table class="evidence">{rows}</table></details></li>'
        )
    return f'<ul class="findings">{"".join(items)}</ul>'


def _evidence_text(key: str, value: object) -> str:
    """An evidence value in the unit its key names."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    unit = Unit.NUMBER
    if key.endswith("_s"):
        unit = Unit.SECONDS
    elif key.endswith("bytes"):
        unit = Unit.BYTES
    elif key.endswith(("fraction", "share")):
        unit = Unit.FRACTION
    elif isinstance(value, int):
        unit = Unit.INTEGER
    return format_value(Value(value, unit, ".4g"))


def notes(lines: Sequence[str], *, title: str | None = None) -> Markup:
    """Plain lines under a title."""
    if not lines:
        return ""
    head = f"<h3>{text(title)}</h3>" if title else ""
    return f'{head}<ul class="notes">{"".join(f"<li>{text(x)}</li>" for x in lines)}</ul>'
