"""What every label, column and title of lightspeed's reports means, as this code
computes it: `lightspeed explain TERM` shows one entry, and `docs/glossary.md` is
`markdown()` written out (a test keeps the two equal).

The entries are in `glossary.txt`, written as a glossary reads: a line `term | alias |
alias`, the definition indented under it (plain text), a blank line between entries;
lines starting with `#` group them. A term is found by its `key`, so a label is found as
a report prints it: case, punctuation, "%", numbers, details in parentheses and whatever
follows a colon or a semicolon do not count ("Top 10 ops by headroom: where to look
first" is "top ops by headroom", "Memory (tracked-storages)" is "memory"); failing that,
a plural finds its singular and back. No two entries may share a key.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import re


@dataclasses.dataclass(frozen=True)
class Entry:
    """One glossary term, the other names it goes by, and what it means (plain text)."""

    term: str
    definition: str
    aliases: tuple[str, ...] = ()


def _parse(text: str) -> tuple[Entry, ...]:
    """The entries of `text` (see the module docstring)."""
    entries = []
    for block in text.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith("#")]
        if not lines:
            continue
        term, *aliases = (name.strip() for name in lines[0].split("|"))
        definition = " ".join(" ".join(lines[1:]).split())
        if not definition or lines[0].startswith(" "):
            raise ValueError(f"glossary: the entry {lines[0].strip()!r} is malformed")
        entries.append(Entry(term=term, definition=definition, aliases=tuple(aliases)))
    return tuple(entries)


# The entries, as a glossary reads (see the module docstring): data, kept beside this module.
_TEXT = (importlib.resources.files("lightspeed") / "glossary.txt").read_text("utf-8")
ENTRIES = _parse(_TEXT)

_PARENTHESES = re.compile(r"\([^()]*\)")
_NOT_WORD = re.compile(r"[^\w]+")


def key(text: str) -> str:
    """The form terms are compared in: lower case, details in parentheses and what
    follows a colon or semicolon left out, punctuation and "%" as spaces, numbers left
    out (so "Top 10 ops by headroom: where to look first" is "top ops by headroom").
    A term that is all parentheses ("(optimizer)") keeps what is inside."""
    text = text.casefold()
    stripped = _PARENTHESES.sub(" ", text)
    if stripped.strip():
        text = stripped
    text = re.split(r"[:;]", text, maxsplit=1)[0]
    words = _NOT_WORD.sub(" ", text.replace("_", " ")).split()
    return " ".join(w for w in words if not w.isdigit())


def _singular(text: str) -> str:
    """`text` with a plural last word made singular (replicates → replicate)."""
    if text.endswith("s") and not text.endswith("ss") and len(text) > 3:
        return text[:-1]
    return text


def _build_index(entries: tuple[Entry, ...]) -> dict[str, Entry]:
    """Each key of a term or alias → its entry; refuses a key two entries share."""
    index: dict[str, Entry] = {}
    for entry in entries:
        for name in (entry.term, *entry.aliases):
            k = key(name)
            if not k:
                raise ValueError(f"glossary: {name!r} has no key")
            other = index.setdefault(k, entry)
            if other is not entry:
                raise ValueError(f"glossary: {name!r} names both {other.term!r} and {entry.term!r}")
    return index


def _singular_index(index: dict[str, Entry]) -> dict[str, Entry | None]:
    """Keys made singular → the entry, where only one entry has that singular (else None)."""
    singular: dict[str, Entry | None] = {}
    for k, entry in index.items():
        s = _singular(k)
        singular[s] = entry if singular.get(s, entry) is entry else None
    return singular


_INDEX = _build_index(ENTRIES)
_SINGULAR = _singular_index(_INDEX)
_NAMES = {key(name): name for e in ENTRIES for name in (e.term, *e.aliases)}


def lookup(term: str) -> Entry | None:
    """The entry `term` names (by its key, see `key`), else the one its singular or
    plural names; None when there is none."""
    k = key(term)
    found = _INDEX.get(k)
    if found is not None or not k:
        return found
    return _SINGULAR.get(_singular(k)) or _INDEX.get(k + "s")


def close_matches(term: str, n: int = 3) -> list[str]:
    """At most `n` terms or aliases (one per entry) spelled like `term`, closest first,
    then those that contain it."""
    k = key(term)
    if not k:
        return []
    alike = difflib.get_close_matches(k, list(_INDEX), n=n, cutoff=0.6)
    containing = [c for c in _INDEX if len(k) >= 3 and k in c]
    found: dict[str, str] = {}  # one name per entry: the first that matched
    for c in alike + containing:
        found.setdefault(_INDEX[c].term, _NAMES[c])
    return list(found.values())[:n]


def sorted_entries() -> list[Entry]:
    """Every entry, by term, case ignored."""
    return sorted(ENTRIES, key=lambda e: e.term.casefold())


def markdown() -> str:
    """The glossary as Markdown: `docs/glossary.md`."""
    parts = [
        "# Glossary\n",
        "What each label, column and title of lightspeed's reports means, as lightspeed"
        " computes it; `lightspeed explain TERM` prints one entry.\n",
    ]
    for entry in sorted_entries():
        parts.append(f"### {_escaped(entry.term)}\n")
        if entry.aliases:
            parts.append("Also: " + ", ".join(f"`{a}`" for a in entry.aliases) + "\n")
        parts.append(_escaped(entry.definition) + "\n")
    return "\n".join(parts)


def _escaped(text: str) -> str:
    """Plain `text` that Markdown shows as it is (`__next__` is not bold)."""
    return re.sub(r"([\\`*_])", r"\\\1", text)
