"""Names that fit a terminal column and keep their identity.

A long op, module or kernel name is cut in the middle (`encoder.lay…out_proj`), where
the parts that tell paths apart are least often found; when two different names would
read alike after cutting (`layers.10.attn` and `layers.11.attn`), each is shown from a
little before the point where it first differs instead (`…ers.10.sel…`). A column's
`abbreviate` (a kernel's name without its template arguments) applies first, and is
given up for names it would make alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

ELLIPSIS = "…"
# Characters kept before the point where a name first differs from a like one.
_CONTEXT = 4


def elide_middle(name: str, width: int) -> str:
    """`name` cut to `width` characters by an ellipsis in its middle."""
    if len(name) <= width:
        return name
    if width <= 1:
        return ELLIPSIS[:width]
    head = width // 2
    tail = width - 1 - head
    return name[:head] + ELLIPSIS + (name[-tail:] if tail else "")


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _window(name: str, others: Sequence[str], width: int) -> str:
    """`name` cut to `width` characters from a little before where it first differs
    from the closest of `others` (their longest common prefix)."""
    p = max(_common_prefix(name, o) for o in others)
    start = max(0, min(p - _CONTEXT, len(name) - (width - 1)))
    room = width - (start > 0)
    end = min(len(name), start + room)
    if end < len(name):
        end -= 1  # room for the closing ellipsis
    return (ELLIPSIS if start > 0 else "") + name[start:end] + (ELLIPSIS if end < len(name) else "")


def _alike(shown: Sequence[str], names: Sequence[str]) -> dict[int, list[int]]:
    """For each row whose shown text another row with a different name shares, those
    other rows."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, text in enumerate(shown):
        groups[text].append(i)
    clashes: dict[int, list[int]] = {}
    for rows in groups.values():
        for i in rows:
            others = [j for j in rows if names[j] != names[i]]
            if others:
                clashes[i] = others
    return clashes


def fit_names(
    names: Sequence[str],
    width: int | None,
    abbreviate: Callable[[str], str] | None = None,
) -> list[str]:
    """How to show each of `names` in a column `width` characters wide (None: any
    width): abbreviated and cut in the middle, never showing two different names alike."""
    shown = [abbreviate(n) for n in names] if abbreviate else list(names)
    for i in _alike(shown, names):
        shown[i] = names[i]
    if width is None:
        return shown
    cut = [elide_middle(s, width) for s in shown]
    for i, others in _alike(cut, shown).items():
        cut[i] = _window(shown[i], [shown[j] for j in others], width)
    for i in _alike(cut, shown):  # a window that still reads like another: in full
        cut[i] = shown[i]
    return cut
