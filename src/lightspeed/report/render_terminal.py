"""Draw a `Document` in the terminal with rich.

`render` returns rich renderables for the CLI's console; `render_text` draws on a
console of a given width with no colour and no environment, so a test compares its
output byte for byte.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text
from rich.tree import Tree as RichTree

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
    Value,
    format_value,
)
from lightspeed.report.names_fit import fit_names
from lightspeed.rules import Finding

_STYLES = {Style.PLAIN: "", Style.BOLD: "bold", Style.WARNING: "yellow", Style.ERROR: "red"}


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


# A name column is cut no narrower than this (or its header) to make a table fit.
MIN_NAME_WIDTH = 8


def _text_of(span: Span) -> str:
    return span if isinstance(span, str) else ""


class _FittedTable:
    """A table whose name columns (`Column.shrink`) are cut in the middle to fit the
    width it is drawn at, keeping different names apart (`names_fit`); `wide` shows
    them whole."""

    def __init__(self, block: Table, wide: bool) -> None:
        self.block = block
        self.wide = wide
        # rich measures a table, then draws it, at the same width: fit it once.
        self._fits: dict[int, RichTable] = {}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self._fitted(console, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self._fitted(console, options))

    def _fitted(self, console: Console, options: ConsoleOptions) -> RichTable:
        if options.max_width not in self._fits:
            self._fits[options.max_width] = self._fit(console, options)
        return self._fits[options.max_width]

    def _fit(self, console: Console, options: ConsoleOptions) -> RichTable:
        every = range(len(self.block.columns))
        if self.wide:
            return self._rich(every, self._shown_names(every, {}))
        table, over = self._narrowed(every, console, options)
        details = [i for i in every if not self.block.columns[i].optional]
        if over > 0 and len(details) < len(every):
            table, _ = self._narrowed(details, console, options)
        return table

    def _narrowed(
        self, shown: Sequence[int], console: Console, options: ConsoleOptions
    ) -> tuple[RichTable, int]:
        """The table of the `shown` columns with its names cut until it fits (or they
        are as narrow as they go), and by how many cells it is still too wide."""
        columns = self.block.columns
        widths: dict[int, int | None] = {i: None for i in shown if columns[i].shrink}
        unbounded = options.update_width(10_000)  # to measure the table's natural width
        done: set[int] = set()  # columns cut as far as they go
        while True:
            names = self._shown_names(shown, widths)
            table = self._rich(shown, names)
            over = Measurement.get(console, unbounded, table).maximum - options.max_width
            now = {i: max(map(len, names[i]), default=0) for i in widths if i not in done}
            if over <= 0 or not now:
                return table, over
            widest = max(now, key=lambda i: now[i])
            target = max(MIN_NAME_WIDTH, len(columns[widest].header), now[widest] - over)
            limit = widths[widest]
            if target >= now[widest] or (limit is not None and target >= limit):
                # Narrower than this would make two names alike, or it is at its floor.
                done.add(widest)
                continue
            widths[widest] = target

    def _shown_names(
        self, shown: Iterable[int], widths: dict[int, int | None]
    ) -> dict[int, list[str]]:
        """The names of each shown name column, fitted to its width in `widths`."""
        columns = self.block.columns
        return {
            i: fit_names(
                [_text_of(row[i]) for row in self.block.rows],
                widths.get(i),
                None if self.wide else columns[i].abbreviate,
            )
            for i in shown
            if columns[i].shrink
        }

    def _rich(self, shown: Iterable[int], names: dict[int, list[str]]) -> RichTable:
        """The rich table of the `shown` columns, name columns drawn as `names`."""
        block = self.block
        table = RichTable(
            title=block.title,
            title_justify="left",
            box=box.SIMPLE if block.framed else box.SIMPLE_HEAD,
            pad_edge=block.framed,
            caption=block.caption,
        )
        shown = list(shown)
        for i in shown:
            c = block.columns[i]
            # Figures keep their width; a name that still does not fit folds onto a
            # second line rather than losing characters.
            table.add_column(
                c.header,
                justify="right" if c.numeric else "left",
                no_wrap=not c.shrink,
                overflow="fold",
                min_width=c.min_width,
            )
        first_bold = len(block.rows) - block.bold_rows
        for r, row in enumerate(block.rows):
            cells = [
                names[i][r] if i in names and isinstance(row[i], str) else _cell(row[i])
                for i in shown
            ]
            table.add_row(*cells, style="bold" if r >= first_bold else None)
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


def _block(block: Block | Section, wide: bool) -> RenderableType:
    if isinstance(block, Section):
        return _section(block, wide)
    if isinstance(block, Fields):
        return _fields(block)
    if isinstance(block, Table):
        return _FittedTable(block, wide)
    if isinstance(block, Tree):
        return _tree(block)
    if isinstance(block, Findings):
        return _findings(block)
    return _notes(block)


def _section(section: Section, wide: bool) -> RenderableType:
    body = Group(*(_block(b, wide) for b in section.blocks))
    if not section.framed:
        return body
    return Panel(body, title=section.title, title_align="left")


def render(doc: Document, *, wide: bool = False) -> RenderableType:
    """Every section of `doc`, in reading order, then its warnings; `wide` draws names
    whole rather than cut to the terminal's width."""
    blocks = [_block(s, wide) for s in doc.sections]
    if doc.warnings:
        lines = tuple(f"warning: {w}" for w in doc.warnings)
        blocks.append(_notes(Notes(lines, title="Warnings", style=Style.WARNING)))
    return Group(*blocks)


# Cells a line may take when nothing but its reader wraps it: as good as unlimited.
UNBOUNDED_WIDTH = 1_000_000


def natural_width(renderable: RenderableType, console: Console) -> int:
    """Cells the widest line of `renderable` takes on `console` with no line wrapped."""
    options = console.options.update_width(UNBOUNDED_WIDTH)
    return Measurement.get(console, options, renderable).maximum


def render_text(doc: Document, width: int = 100, *, wide: bool = False) -> str:
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
    console.print(render(doc, wide=wide))
    return out.getvalue()
