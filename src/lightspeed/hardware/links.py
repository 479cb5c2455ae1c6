"""The catalog's links (`[link.<id>]` in `catalog.toml`): lookup by id or alias."""

from __future__ import annotations

import functools
from typing import Any

from lightspeed.errors import UnknownNameError, did_you_mean
from lightspeed.facts.link import Link
from lightspeed.hardware.catalog import catalog_data


@functools.cache
def _links() -> tuple[dict[str, Link], dict[str, str]]:
    """(links by id in catalog order, alias → id)."""
    data = catalog_data()
    citations: dict[str, str] = data["citations"]
    links: dict[str, Link] = {}
    aliases: dict[str, str] = {}
    for link_id, entry in data.get("link", {}).items():
        links[link_id] = _entry_to_link(link_id, entry, citations)
        for alias in entry.get("aliases", []):
            if alias in aliases or alias in data["link"]:
                raise RuntimeError(f"catalog.toml: link alias {alias!r} names two links")
            aliases[alias] = link_id
    return links, aliases


def _entry_to_link(link_id: str, entry: dict[str, Any], citations: dict[str, str]) -> Link:
    sources = {"*": citations[entry["source"]]}
    for field, citation_id in entry.get("sources", {}).items():
        sources[field] = citations[citation_id]
    return Link(
        id=link_id,
        name=entry["name"],
        bandwidth_bytes_per_s=float(entry["bandwidth_bytes_per_s"]),
        latency_s=float(entry["latency_s"]),
        sources=sources,
    )


def link_ids() -> list[str]:
    """The ids of every catalog link, in catalog order (aliases left out)."""
    return list(_links()[0])


def catalog_link(link_id: str) -> Link:
    """The catalog link `link_id` (an id or an alias such as `nvlink`), or an error
    suggesting the closest ids."""
    links, aliases = _links()
    key = aliases.get(link_id.lower(), link_id.lower())
    try:
        return links[key]
    except KeyError:
        raise UnknownNameError(
            f"unknown link {link_id!r}."
            + (did_you_mean(link_id, [*links, *aliases]) or f" Known: {', '.join(links)}.")
            + " List them with `lightspeed hw list --links`."
        ) from None
