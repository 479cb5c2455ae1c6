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
# Characters of a kernel's template arguments kept to tell it from a like one.
_DIFFERENCE = 10


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


def _qualified_cut(name: str, width: int) -> str:
    """`name` cut to `width` characters, a C++ name (`at::native::f<…>…`) first by its
    namespaces from the front (`…f<…>…`), its own name and what follows it last."""
    head_end = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    head, rest = name[:head_end], name[head_end:]
    parts = head.split("::")
    while len(parts) > 1 and len(name) > width:
        parts = parts[1:]
        name = ELLIPSIS + "::".join(parts) + rest
    if len(name) <= width:
        return name
    own = len(name) - len(rest)
    if own < width:  # the kernel's name fits: cut what follows it
        return name[: width - 1] + ELLIPSIS
    return elide_middle(name, width)


def _own_name(short: str) -> str:
    """The kernel's own name in its abbreviation: `at::native::f` → `f`."""
    return short.rsplit("::", 1)[-1]


def _told_apart(name: str, short: str, others: Sequence[str], width: int) -> str:
    """`name`, whose abbreviation `short` the `others` share, in `width` characters: its
    own name, then `name` from a little before where it first differs from the closest
    of the others."""
    p = max(_common_prefix(name, o) for o in others)
    own = _own_name(short)
    at = name.find(own + "<")
    start = max(at + len(own) + 1 if at >= 0 else 0, p - _CONTEXT)
    room = width - len(own) - 2  # an ellipsis before the difference and one after
    if room < _DIFFERENCE:  # telling them apart comes first: the name cut in its middle
        own = elide_middle(own, max(1, width - 2 - _DIFFERENCE))
        room = width - len(own) - 2
    rest = name[start:]
    tail = rest if len(rest) <= room + 1 else rest[:room] + ELLIPSIS
    return own + ELLIPSIS + tail


def fit_names(
    names: Sequence[str],
    width: int | None,
    abbreviate: Callable[[str], str] | None = None,
) -> list[str]:
    """How to show each of `names` in a column `width` characters wide (None: any
    width): abbreviated and cut, never showing two different names alike.

    With `abbreviate` (a kernel's name without its template arguments), names it makes
    alike are shown whole at any width, and at a given one keep their own name and go
    on from where they differ; a name is cut by its namespaces before its own name.
    Without, a name is cut in the middle."""
    if abbreviate is None:
        return _fit_plain(names, width)
    short = [abbreviate(n) for n in names]
    clashes = _alike(short, names)
    if width is None:
        return [names[i] if i in clashes else s for i, s in enumerate(short)]
    cut = [_qualified_cut(s, width) for s in short]
    for i, others in clashes.items():
        cut[i] = _told_apart(names[i], short[i], [names[j] for j in others], width)
    if _alike(cut, names):  # still alike: each cut in its middle, apart from the others
        plain = _fit_plain([names[i] if i in clashes else s for i, s in enumerate(short)], width)
        still = _alike(cut, names)
        cut = [plain[i] if i in still else c for i, c in enumerate(cut)]
    return cut


def _fit_plain(names: Sequence[str], width: int | None) -> list[str]:
    shown = list(names)
    if width is None:
        return shown
    cut = [elide_middle(s, width) for s in shown]
    for i, others in _alike(cut, shown).items():
        cut[i] = _window(shown[i], [shown[j] for j in others], width)
    for i in _alike(cut, shown):  # a window that still reads like another: in full
        cut[i] = shown[i]
    return cut
