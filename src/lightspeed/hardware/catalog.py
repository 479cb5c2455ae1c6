"""The datasheet catalog (`catalog.toml`): lookup by id, and the entry of a device by
the name it reports or, where the name is generic, by its SM count and memory.

The catalog's links are read by `links.py` from the same parsed file."""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from importlib import resources
from typing import Any

from lightspeed.errors import ConfigError, UnknownNameError, did_you_mean
from lightspeed.facts.hardware import DeviceKind, Hardware, optional_float, peaks_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CATALOG_SCHEMA_VERSION = 1
# A device reports a little less memory than its datasheet's GiB (the driver keeps some:
# the shared traces' A100-PG509-200 reports 39.4 of 40 GiB, a V100-SXM2-16GB 15.8 of 16,
# a B200 178.4 of 180). Memory within this fraction of an entry's `memory_bytes` is the
# entry's; no two entries alike in SM count differ in memory by so little.
MEMORY_TOLERANCE = 0.06


@dataclasses.dataclass(frozen=True)
class _Names:
    """The names a device of an entry reports: its own, and generic ones it shares."""

    own: tuple[re.Pattern[str], ...]
    generic: tuple[re.Pattern[str], ...]


@functools.cache
def catalog_data() -> dict[str, Any]:
    """`catalog.toml` as parsed: its `citations`, `gpu` and `link` tables (read once)."""
    text = resources.files("lightspeed.hardware").joinpath("catalog.toml").read_text("utf-8")
    data = tomllib.loads(text)
    if data.get("schema_version") != CATALOG_SCHEMA_VERSION:
        raise RuntimeError(f"catalog.toml has schema_version {data.get('schema_version')!r}")
    return data


@functools.cache
def _catalog() -> tuple[dict[str, Hardware], dict[str, _Names]]:
    data = catalog_data()
    citations: dict[str, str] = data["citations"]
    entries: dict[str, Hardware] = {}
    names: dict[str, _Names] = {}
    for hw_id, entry in data["gpu"].items():
        entries[hw_id] = _entry_to_hardware(hw_id, entry, citations)
        names[hw_id] = _Names(
            own=tuple(re.compile(p) for p in entry.get("device_names", [])),
            generic=tuple(re.compile(p) for p in entry.get("generic_names", [])),
        )
    return entries, names


def _entry_to_hardware(hw_id: str, entry: dict[str, Any], citations: dict[str, str]) -> Hardware:
    sources = {"*": citations[entry["source"]]}
    for field, citation_id in entry.get("sources", {}).items():
        sources[field] = citations[citation_id]
    transistors_per_mm2 = _transistor_density(hw_id, entry, sources)
    return Hardware(
        id=hw_id,
        name=entry["name"],
        kind=DeviceKind.GPU,
        peak_flops_per_s=peaks_of(entry["peak_flops_per_s"]),
        matrix_peak_flops_per_s=peaks_of(entry.get("matrix_peak_flops_per_s", {})),
        memory_bandwidth_bytes_per_s=float(entry["memory_bandwidth_bytes_per_s"]),
        memory_bytes=entry.get("memory_bytes"),
        sm_count=entry.get("sm_count"),
        clock_hz=optional_float(entry.get("clock_hz")),
        l2_bytes=entry.get("l2_bytes"),
        board_power_w=optional_float(entry.get("board_power_w")),
        vendor=entry.get("vendor"),
        process_nm=optional_float(entry.get("process_nm")),
        transistors_per_mm2=transistors_per_mm2,
        gpu_link_bytes_per_s=entry.get("gpu_link_bytes_per_s"),
        host_link_bytes_per_s=entry.get("host_link_bytes_per_s"),
        sources=sources,
    )


def _transistor_density(hw_id: str, entry: dict[str, Any], sources: dict[str, str]) -> float | None:
    """Transistors per mm² of the die that does the math: the entry's `transistors` over
    its `die_area_mm2`, or None where either is not published. The two numbers' citations
    (`sources.transistors`, `sources.die_area_mm2`) become the one of the density."""
    transistors, area = entry.get("transistors"), entry.get("die_area_mm2")
    cited = [sources.pop(name, sources["*"]) for name in ("transistors", "die_area_mm2")]
    if transistors is None or area is None:
        return None
    if not area > 0:
        raise ConfigError(f"hardware {hw_id!r}: die_area_mm2 must be positive.")
    count, size = cited
    sources["transistors_per_mm2"] = (
        count if count == size else f"transistors: {count}; die area: {size}"
    )
    return float(transistors) / float(area)


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


def catalog_id_for_device(
    name: str, sm_count: int | None = None, memory_bytes: int | None = None
) -> str | None:
    """The catalog id of a GPU that reports `name`, `sm_count` SMs (an AMD GPU's CUs)
    and `memory_bytes` of memory (None where unknown), or None if it is not catalogued.

    The name first: the entry one of whose `device_names` it matches in full, unless
    the device has another SM count than the entry (then it is a cut-down part or a
    partition of it, and not the entry). A name no entry matches, such as ROCm's
    generic "AMD Radeon Graphics", maps by SM count and memory: to the one entry with
    that `sm_count` whose `memory_bytes` is within MEMORY_TOLERANCE of `memory_bytes`
    or, where several are alike (an MI210 and an MI250 GCD), to the one of them whose
    `generic_names` match the name; none when none or several remain.

    This is the one place a device, local or in a trace, is mapped to a catalog entry.
    """
    entries, names = _catalog()
    name = name.strip()
    for hw_id, entry_names in names.items():
        if any(p.fullmatch(name) for p in entry_names.own) and sm_count in (
            None,
            entries[hw_id].sm_count,
        ):
            return hw_id
    if any(any(p.fullmatch(name) for p in n.own) for n in names.values()):
        return None  # a known model with another SM count: no entry of ours
    if sm_count is None or memory_bytes is None:
        return None
    alike = [
        hw_id
        for hw_id, hw in entries.items()
        if hw.sm_count == sm_count
        and hw.memory_bytes is not None
        and abs(memory_bytes - hw.memory_bytes) <= MEMORY_TOLERANCE * hw.memory_bytes
    ]
    if len(alike) > 1:
        alike = [hw_id for hw_id in alike if any(p.fullmatch(name) for p in names[hw_id].generic)]
    return alike[0] if len(alike) == 1 else None


def catalog_id_for_device_name(device_name: str) -> str | None:
    """The catalog id of a GPU whose driver reports `device_name`, or None if not
    catalogued (`catalog_id_for_device` with the name alone)."""
    return catalog_id_for_device(device_name)
