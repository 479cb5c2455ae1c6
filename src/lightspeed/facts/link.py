"""`Link`: what connects the processes of a data-parallel step, as a latency and a
bandwidth: a cited catalog entry or a measured one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from lightspeed.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True)
class Link:
    """A point-to-point link between two processes.

    `bandwidth_bytes_per_s`: bytes per second in ONE direction, what each step of a ring
    all-reduce sends over it (a datasheet's aggregate of both directions is halved).
    `latency_s`: the time a message takes beyond its bytes over the bandwidth, in
    seconds, so one message of b bytes takes `latency_s + b / bandwidth_bytes_per_s`.
    `sources`: where each figure comes from, by field name, "*" for every field.
    """

    id: str
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0:
            raise ConfigError(
                f"link {self.id!r}: bandwidth {self.bandwidth_bytes_per_s} B/s must be positive."
            )
        if not self.latency_s >= 0:
            raise ConfigError(f"link {self.id!r}: latency {self.latency_s} s must be 0 or more.")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def source_of(self, field: str) -> str | None:
        """Where the number in `field` comes from, if cited."""
        return self.sources.get(field, self.sources.get("*"))

    def message_time_s(self, nbytes: float) -> float:
        """Seconds to send one message of `nbytes` bytes one way."""
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s


def link_to_dict(link: Link) -> dict[str, Any]:
    """A JSON-ready dict of `link`."""
    return {
        "id": link.id,
        "name": link.name,
        "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
        "latency_s": link.latency_s,
        "sources": dict(link.sources),
    }


def link_from_dict(data: Mapping[str, Any]) -> Link:
    """The Link `link_to_dict` wrote."""
    return Link(
        id=str(data["id"]),
        name=str(data["name"]),
        bandwidth_bytes_per_s=float(data["bandwidth_bytes_per_s"]),
        latency_s=float(data["latency_s"]),
        sources=dict(data.get("sources", {})),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinkMeasurement:
    """A link measured by ping-pong between two processes.

    `half_round_trip_s`: half the round-trip time of a message, in seconds, by its size
    in bytes. `link`: the latency and bandwidth fitted to them, from the sizes
    `latency_bytes` and `bandwidth_bytes` name. `backend`: the process group's
    (gloo, nccl); `processes`: how many torchrun started.
    """

    link: Link
    half_round_trip_s: Mapping[int, float]
    latency_bytes: tuple[int, ...]
    bandwidth_bytes: tuple[int, ...]
    backend: str
    processes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class CoRun:
    """How much slower one process computes while `processes` processes share the
    machine than alone: each ratio (≥ 0; 1.0: no slower) is a fixed kernel's time in
    company over its time alone — `compute` a matrix product, `memory` a copy larger
    than the caches, `overhead` a run of tiny ops (the host's per-op cost). Processes
    on devices of their own (one GPU each) share nothing: all 1.0."""

    processes: int
    compute: float = 1.0
    memory: float = 1.0
    overhead: float = 1.0

    def __post_init__(self) -> None:
        if min(self.compute, self.memory, self.overhead) <= 0:
            raise ValueError(f"co-run slowdowns must be positive: {self}")
