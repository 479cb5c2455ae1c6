"""The reports of data parallelism: a measured link (`lightspeed hw link`), the
catalog's links (`lightspeed hw list --links`), and a step timed in N processes
(`lightspeed time --nproc N`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from lightspeed.document import (
    Column,
    Document,
    Fields,
    Line,
    Section,
    Table,
    Unit,
    Value,
    line,
)
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.link import Link, LinkMeasurement, link_to_dict
from lightspeed.facts.timing import StepTiming
from lightspeed.report.timing_report import timing_document


def link_document(measured: LinkMeasurement) -> Document:
    """A measured link: its fitted latency and bandwidth, each message size's half round
    trip, and how each figure was fitted."""
    link = measured.link
    facts = Fields(
        (
            ("link", line(f"{link.id}: {link.name}")),
            (
                "processes",
                line(f"ranks 0 and 1 of {measured.processes}, {measured.backend}"),
            ),
            ("latency", line(Value(link.latency_s, Unit.SECONDS), " a message")),
            (
                "link bandwidth",
                line(Value(link.bandwidth_bytes_per_s, Unit.BYTE_RATE), " each way"),
            ),
        )
    )
    rows = tuple(
        (
            Value(size, Unit.BYTES),
            Value(seconds, Unit.SECONDS),
            Value(size / seconds if seconds > 0 else None, Unit.BYTE_RATE),
        )
        for size, seconds in sorted(measured.half_round_trip_s.items())
    )
    table = Table(
        title="Ping-pong: half a round trip by message size",
        columns=(
            Column("bytes", "message size", numeric=True),
            Column("half_round_trip_s", "half round trip", numeric=True),
            Column("rate_bytes_per_s", "rate", numeric=True),
        ),
        rows=rows,
    )
    sources = Fields(
        tuple(
            (label, line(link.source_of(field) or ""))
            for label, field in (
                ("latency", "latency_s"),
                ("link bandwidth", "bandwidth_bytes_per_s"),
            )
        ),
        title="Sources",
    )
    data = {
        "link": link_to_dict(link),
        "processes": measured.processes,
        "backend": measured.backend,
        "half_round_trip_s": {str(k): v for k, v in sorted(measured.half_round_trip_s.items())},
        "latency_bytes": list(measured.latency_bytes),
        "bandwidth_bytes": list(measured.bandwidth_bytes),
    }
    section = Section("Link: measured between two processes", (facts, table, sources))
    return Document(kind="link", data=data, sections=(section,))


def link_list_document(links: Sequence[Link]) -> Document:
    """One row per catalog link: id, name, one-way bandwidth (GB/s), latency."""
    table = Table(
        title="Links: bandwidth each way in GB/s, latency a message",
        columns=(
            Column("id", "id"),
            Column("name", "name", shrink=True),
            Column("bandwidth_gb_per_s", "GB/s", numeric=True),
            Column("latency_s", "latency", numeric=True),
        ),
        rows=tuple(
            (
                link.id,
                link.name,
                Value(link.bandwidth_bytes_per_s / 1e9, Unit.NUMBER, ",.4g"),
                Value(link.latency_s, Unit.SECONDS),
            )
            for link in links
        ),
        framed=True,
    )
    return Document(
        kind="link_list", data={"links": [link_to_dict(k) for k in links]}, sections=(table,)
    )


def data_parallel_timing_document(
    timing: StepTiming,
    hardware: Hardware | None,
    *,
    processes: int,
    per_device_batch: int,
    threads: int,
    backend: str,
) -> Document:
    """The timing report of a step run in `processes` processes: `timing`'s workload
    holds the global batch, so its throughput counts every process's samples."""
    doc = timing_document(timing, hardware)
    row: tuple[str, Line] = (
        "processes",
        line(
            f"{processes} × batch {per_device_batch}, {threads} thread"
            f"{'s' if threads > 1 else ''} each, DistributedDataParallel over {backend};"
            " each replicate is the slowest process's"
        ),
    )
    sections = list(doc.sections)
    first = sections[0]
    if isinstance(first, Section) and first.blocks and isinstance(first.blocks[0], Fields):
        fields = first.blocks[0]
        rows = (*fields.rows[:1], row, *fields.rows[1:])
        first = dataclasses.replace(
            first, blocks=(dataclasses.replace(fields, rows=rows), *first.blocks[1:])
        )
        sections[0] = first
    else:
        sections.insert(0, Section("Data parallel", (Fields((row,)),)))
    data = {
        **doc.data,
        "data_parallel": {
            "processes": processes,
            "per_device_batch": per_device_batch,
            "threads_per_process": threads,
            "backend": backend,
        },
    }
    return dataclasses.replace(doc, data=data, sections=tuple(sections))
