"""Draw a `Document` in the terminal with rich.

`render` returns rich renderables for the CLI's console; `render_text` draws on a
console of a given width with no colour and no environment, so a test compares its
output byte for byte.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text
from rich.tree import Tree as RichTree

from lightspeed import units
from lightspeed.document import (
    Block,
    Document,
    Fields,
    Findings,
    Line,
    Notes,
    Section,
    Span,
    Style,
    Table,
    Tree,
    Unit,
    Value,
)
from lightspeed.rules import Finding

_STYLES = {Style.PLAIN: "", Style.BOLD: "bold", Style.WARNING: "yellow", Style.ERROR: "red"}


# How each unit reads in a terminal: SI prefixes for rates and counts, binary for sizes.
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
    """The text of one value, with its unit's prefix and `suffix`."""
    raw = v.raw
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return "—"
    if isinstance(raw, str) or v.unit is Unit.TEXT:
        return str(raw) + v.suffix
    formatter = _FORMATS.get(v.unit)
    text = formatter(raw) if formatter is not None else format(raw, v.spec)
    return text + v.suffix


def line_text(spans: Line) -> Text:
    """A Line as rich Text, each value in its style."""
    text = Text()
    for span in spans:
        if isinstance(span, Value):
            text.append(format_value(span), style=_STYLES[span.style])
        else:
            text.append(span)
    return text


def _cell(span: Span) -> Text | str:
    return line_text((span,)) if isinstance(span, Value) else span


def finding_line(f: Finding, with_gain: bool = True) -> str:
    """One finding as a bullet: `• [kind] message (fixing it: at most N× faster)`."""
    gain = f.max_speedup
    bound = ""
    if with_gain and gain is not None and math.isfinite(gain) and gain > 1.005:
        bound = f" (fixing it: at most {gain:.2f}× faster)"
    return f"• [{f.kind.value}] {f.message}{bound}"


def _fields(block: Fields) -> RenderableType:
    grid = RichTable.grid(padding=(0, 2))
    for label, spans in block.rows:
        grid.add_row(label, line_text(spans))
    if block.title is None:
        return grid
    return Group(Text(block.title, style="bold"), grid)


def _table(block: Table) -> RenderableType:
    table = RichTable(
        title=block.title,
        title_justify="left",
        box=box.SIMPLE if block.framed else box.SIMPLE_HEAD,
        pad_edge=block.framed,
        caption=block.caption,
    )
    for c in block.columns:
        # Names are the columns that give way: rich narrows only wrappable columns, and
        # an ellipsis keeps each row on one line; figures keep their full width.
        table.add_column(
            c.header,
            justify="right" if c.numeric else "left",
            no_wrap=not c.shrink,
            overflow="ellipsis" if c.shrink else "fold",
            min_width=c.min_width,
        )
    first_bold = len(block.rows) - block.bold_rows
    for i, row in enumerate(block.rows):
        table.add_row(*(_cell(s) for s in row), style="bold" if i >= first_bold else None)
    return table


def _tree(node: Tree, parent: RichTree | None = None) -> RichTree:
    branch = (
        RichTree(line_text(node.label)) if parent is None else parent.add(line_text(node.label))
    )
    for child in node.children:
        _tree(child, branch)
    return branch


def _findings(block: Findings) -> RenderableType:
    if not block.findings:
        return Text(f"{block.title}: {block.empty}")
    lines = [Text(finding_line(f, with_gain=not f.kind.states_its_gain)) for f in block.findings]
    return Group(Text(block.title, style="bold"), *lines)


def _notes(block: Notes) -> RenderableType:
    style = _STYLES[block.style]
    lines = [Text(n, style=style) for n in block.lines]
    if block.title is None:
        return Group(*lines)
    return Group(Text(block.title, style="bold"), *lines)


def _block(block: Block | Section) -> RenderableType:
    if isinstance(block, Section):
        return _section(block)
    if isinstance(block, Fields):
        return _fields(block)
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Tree):
        return _tree(block)
    if isinstance(block, Findings):
        return _findings(block)
    return _notes(block)


def _section(section: Section) -> RenderableType:
    body = Group(*(_block(b) for b in section.blocks))
    if not section.framed:
        return body
    return Panel(body, title=section.title, title_align="left")


def render(doc: Document) -> RenderableType:
    """Every section of `doc`, in reading order, then its warnings."""
    blocks = [_block(s) for s in doc.sections]
    if doc.warnings:
        lines = tuple(f"warning: {w}" for w in doc.warnings)
        blocks.append(_notes(Notes(lines, title="Warnings", style=Style.WARNING)))
    return Group(*blocks)


def render_text(doc: Document, width: int = 100) -> str:
    """`doc` drawn as plain text `width` columns wide: the same bytes on every machine."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        color_system=None,
        force_terminal=False,
        highlight=False,
        emoji=False,
        legacy_windows=False,
        _environ={},
    )
    console.print(render(doc))
    return out.getvalue()
