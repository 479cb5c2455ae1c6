"""The datasheet catalog (`catalog.toml`): lookup by id, and the local GPU's entry.

The catalog's links are read by `links.py` from the same parsed file."""

from __future__ import annotations

import functools
import re
import sys
from importlib import resources
from typing import Any

from lightspeed.dtypes import Precision
from lightspeed.errors import UnknownNameError, did_you_mean
from lightspeed.facts.hardware import DeviceKind, Hardware

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CATALOG_SCHEMA_VERSION = 1


@functools.cache
def catalog_data() -> dict[str, Any]:
    """`catalog.toml` as parsed: its `citations`, `gpu` and `link` tables (read once)."""
    text = resources.files("lightspeed.hardware").joinpath("catalog.toml").read_text("utf-8")
    data = tomllib.loads(text)
    if data.get("schema_version") != CATALOG_SCHEMA_VERSION:
        raise RuntimeError(f"catalog.toml has schema_version {data.get('schema_version')!r}")
    return data


@functools.cache
def _catalog() -> tuple[dict[str, Hardware], dict[str, tuple[re.Pattern[str], ...]]]:
    data = catalog_data()
    citations: dict[str, str] = data["citations"]
    entries: dict[str, Hardware] = {}
    patterns: dict[str, tuple[re.Pattern[str], ...]] = {}
    for hw_id, entry in data["gpu"].items():
        entries[hw_id] = _entry_to_hardware(hw_id, entry, citations)
        patterns[hw_id] = tuple(re.compile(p) for p in entry.get("device_names", []))
    return entries, patterns


def _entry_to_hardware(hw_id: str, entry: dict[str, Any], citations: dict[str, str]) -> Hardware:
    sources = {"*": citations[entry["source"]]}
    for field, citation_id in entry.get("sources", {}).items():
        sources[field] = citations[citation_id]
    return Hardware(
        id=hw_id,
        name=entry["name"],
        kind=DeviceKind.GPU,
        peak_flops_per_s={Precision(p): float(v) for p, v in entry["peak_flops_per_s"].items()},
        memory_bandwidth_bytes_per_s=float(entry["memory_bandwidth_bytes_per_s"]),
        memory_bytes=entry.get("memory_bytes"),
        sm_count=entry.get("sm_count"),
        gpu_link_bytes_per_s=entry.get("gpu_link_bytes_per_s"),
        host_link_bytes_per_s=entry.get("host_link_bytes_per_s"),
        sources=sources,
    )


def catalog_ids() -> list[str]:
    """The ids of every catalog entry, in catalog order."""
    return list(_catalog()[0])


def catalog_hardware(hw_id: str) -> Hardware:
    """The catalog entry `hw_id`, or an error suggesting the closest ids."""
    entries = _catalog()[0]
    try:
        return entries[hw_id]
    except KeyError:
        raise UnknownNameError(
            f"unknown hardware {hw_id!r}."
            + (did_you_mean(hw_id.lower(), entries) or f" Known: {', '.join(entries)}.")
            + " List them with `lightspeed hw list`."
        ) from None


def catalog_id_for_device_name(device_name: str) -> str | None:
    """The catalog id of a GPU whose driver reports `device_name`, or None if not catalogued.

    This is the one place a local device is mapped to a catalog entry.
    """
    for hw_id, patterns in _catalog()[1].items():
        if any(p.fullmatch(device_name.strip()) for p in patterns):
            return hw_id
    return None
