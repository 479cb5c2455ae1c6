"""The report of a latency profile (`lightspeed serve-profile`): ℓ(b) for each batch
size as Nexus tabulates it (batch, latency, std, memory), with the tail, throughput
and each batch on the roofline; and the JSON it round-trips through."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed.document import (
    Column,
    Document,
    Fields,
    Section,
    Table,
    Unit,
    Value,
    line,
)
from lightspeed.facts.hardware import Hardware, hardware_to_dict
from lightspeed.facts.serving import BatchLatency, LatencyForecast, LatencyProfile
from lightspeed.predict.serving import ServingPlan, Session, SessionOutcome
from lightspeed.report.hardware_report import hardware_summary
from lightspeed.report.profile_report import carried_table, validated_line

DOCUMENT = "latency-profile"

COLUMNS = (
    Column("batch", "batch", numeric=True),
    Column("median", "latency", numeric=True),
    Column("std", "std", numeric=True),
    Column("p99", "p99", numeric=True),
    Column("throughput", "samples/s", numeric=True),
    Column("sol", "of SoL", numeric=True),
    Column("memory", "peak memory", numeric=True, optional=True),
)


def batch_data(b: BatchLatency) -> dict[str, Any]:
    """One batch size's latency, with every timed call."""
    return {
        "batch_size": b.batch_size,
        "median_s": b.median_s,
        "mean_s": b.mean_s,
        "std_s": b.std_s,
        "p99_s": b.p99_s,
        "throughput_per_s": b.throughput_per_s,
        "flops": b.flops,
        "bytes": b.bytes,
        "sol_time_s": b.sol_time_s,
        "fraction_of_sol": b.fraction_of_sol,
        "peak_memory_bytes": b.peak_memory_bytes,
        "latencies_s": list(b.latencies_s),
    }


def latency_data(p: LatencyProfile) -> dict[str, Any]:
    """The latency profile as the JSON `latency` object."""
    return {
        "name": p.name,
        "target": p.target,
        "device": p.device,
        "hardware_id": p.hardware_id,
        "threads": p.threads,
        "predicted_from": p.predicted_from,
        "batches": [batch_data(b) for b in p.batches],
    }


def latency_from_data(data: Mapping[str, Any]) -> LatencyProfile:
    """The LatencyProfile `latency_data` wrote."""
    return LatencyProfile(
        name=data["name"],
        target=data.get("target"),
        device=data["device"],
        hardware_id=data["hardware_id"],
        threads=data["threads"],
        predicted_from=data.get("predicted_from"),
        batches=tuple(
            BatchLatency(
                batch_size=b["batch_size"],
                latencies_s=tuple(b["latencies_s"]),
                flops=b["flops"],
                bytes=b["bytes"],
                sol_time_s=b.get("sol_time_s"),
                peak_memory_bytes=b.get("peak_memory_bytes"),
            )
            for b in data["batches"]
        ),
    )


def batch_cells(b: BatchLatency) -> tuple[Value | str, ...]:
    """One row of the latency table, under `COLUMNS`."""
    return (
        Value(b.batch_size, Unit.INTEGER),
        Value(b.median_s, Unit.SECONDS),
        Value(b.std_s, Unit.SECONDS),
        Value(b.p99_s, Unit.SECONDS),
        Value(b.throughput_per_s, Unit.COUNT),
        "–" if b.fraction_of_sol is None else Value(b.fraction_of_sol, Unit.FRACTION),
        "–" if b.peak_memory_bytes is None else Value(b.peak_memory_bytes, Unit.BYTES),
    )


def latency_columns(profile: LatencyProfile) -> tuple[Column, ...]:
    """The latency table's columns: peak memory only where it was measured (a device
    allocator's statistics, on CUDA)."""
    measured = any(b.peak_memory_bytes is not None for b in profile.batches)
    return COLUMNS if measured else COLUMNS[:-1]


CAPTION = (
    "latency: the median call, each timed alone; of SoL: the forward's speed of light over"
    " that latency"
)


def latency_document(
    profile: LatencyProfile, hardware: Hardware | None, forecast: LatencyForecast | None = None
) -> Document:
    """ℓ(b) by batch size, the best throughput, and the hardware it ran on; with
    `forecast`, ℓ(b) predicted on other hardware or in another precision too (the
    document's `predicted`, which `serve-plan` plans with)."""
    best = max(profile.batches, key=lambda b: b.throughput_per_s)
    first = profile.batches[0]
    summary = Fields(
        (
            ("model", line(f"{profile.name}: forward only, inference mode, on {profile.device}")),
            ("threads", line(str(profile.threads))),
            (
                "best",
                line(
                    Value(best.throughput_per_s, Unit.COUNT, suffix=" samples/s"),
                    f" at batch {best.batch_size} (",
                    Value(best.throughput_per_s / first.throughput_per_s, Unit.NUMBER, ".1f"),
                    f"× batch {first.batch_size}'s)",
                ),
            ),
        )
    )
    columns = latency_columns(profile)
    table = Table(
        "Latency by batch size",
        columns,
        tuple(batch_cells(b)[: len(columns)] for b in profile.batches),
        caption=CAPTION,
    )
    sections: list[Section] = [Section("Latency profile", (summary, table))]
    if forecast is not None:
        sections.append(_forecast_section(forecast))
    if hardware is not None:
        sections.append(hardware_summary(hardware))
    data: dict[str, Any] = {
        "latency": latency_data(profile),
        "hardware": None if hardware is None else hardware_to_dict(hardware),
    }
    if forecast is not None:
        data["predicted"] = {
            "latency": latency_data(forecast.latency),
            "scales": list(forecast.scales),
            "prediction": dataclasses.asdict(forecast.prediction),
        }
    return Document(kind=DOCUMENT, data=data, sections=tuple(sections))


FORECAST_COLUMNS = (
    Column("batch", "batch", numeric=True),
    Column("median", "latency", numeric=True),
    Column("p99", "p99", numeric=True),
    Column("throughput", "samples/s", numeric=True),
    Column("sol", "of SoL", numeric=True),
    Column("scale", "× measured", numeric=True),
    Column("memory", "peak memory", numeric=True, optional=True),
)
FORECAST_CAPTION = (
    "each measured call × the forward's predicted time over its measured time, the forward"
    " profiled op by op as a step; of SoL: on the predicted hardware"
)


SPREAD_ASSUMPTION = "each batch size's calls spread as measured, scaled with their median"


def forecast_changes(changes: Mapping[str, str]) -> str:
    """A forecast's changes as `serve-profile` takes them: "--predict-hardware h100-sxm"."""
    return ", ".join(f"--predict-{name} {value}" for name, value in changes.items())


def forecast_cells(b: BatchLatency, scale: float) -> tuple[Value | str, ...]:
    """One row of the predicted latency table, under `FORECAST_COLUMNS`: `b` as
    predicted, `scale` its predicted time over the measured one."""
    return (
        Value(b.batch_size, Unit.INTEGER),
        Value(b.median_s, Unit.SECONDS),
        Value(b.p99_s, Unit.SECONDS),
        Value(b.throughput_per_s, Unit.COUNT),
        "–" if b.fraction_of_sol is None else Value(b.fraction_of_sol, Unit.FRACTION),
        Value(scale, Unit.NUMBER, ".3g", suffix="×"),
        "–" if b.peak_memory_bytes is None else Value(b.peak_memory_bytes, Unit.BYTES),
    )


def _forecast_section(forecast: LatencyForecast) -> Section:
    """ℓ(b) predicted: by batch size, how, and each kind of op carried over."""
    made = forecast.prediction
    predicted = forecast.latency
    change = forecast_changes(made.changes)
    largest = predicted.batches[-1].batch_size
    rows: list[tuple[str, Any]] = [
        ("predicted with", line(change)),
        ("from", line(f"ℓ(b) measured on {made.source_hardware}")),
        ("validated", validated_line(made.validated)),
        ("assumption", line(SPREAD_ASSUMPTION)),
    ]
    rows += [("rule", line(rule)) for rule in made.rules]
    rows += [("assumption", line(assumption)) for assumption in made.assumptions]
    table = Table(
        f"Predicted latency on {predicted.hardware_id}",
        FORECAST_COLUMNS,
        tuple(
            forecast_cells(b, scale)
            for b, scale in zip(predicted.batches, forecast.scales, strict=True)
        ),
        caption=FORECAST_CAPTION,
    )
    blocks: list[Fields | Table] = [Fields(tuple(rows)), table]
    if made.carried:
        blocks.append(carried_table(made.carried, f"Carried over by kind of op, batch {largest}"))
    return Section("Prediction", tuple(blocks))


PLAN_DOCUMENT = "serving-plan"
PLAN_CAPTION = (
    "whole: one session's batches back to back; cycled: its batch every cycle; shared:"
    " each session's batch once a cycle; busy: the share of the cycle its batches take"
)


def gpu_kind(saturated: bool, shares: int) -> str:
    """How a GPU of a plan runs: "whole" (one session back to back), "cycled" (one
    session's batch every cycle) or "shared" (several sessions' batches a cycle)."""
    if saturated:
        return "whole"
    return "shared" if shares > 1 else "cycled"


def plan_document(
    sessions: Sequence[Session],
    served: ServingPlan,
    outcomes: Sequence[SessionOutcome],
    baseline_gpus: int,
    simulated_s: float,
    measured: Sequence[SessionOutcome] | None = None,
    run_s: float | None = None,
) -> Document:
    """The plan: each GPU's duty cycle, occupancy and the sessions it runs; the GPUs
    against one model per GPU at batch 1; the simulation's share within each SLO; and,
    where the plan also ran for real for `run_s` seconds (`measured`), each session's
    measured share within its SLO and p99 beside the simulated share."""
    gpu_rows = []
    for i, gpu in enumerate(served.gpus, 1):
        for share in gpu.shares:
            gpu_rows.append(
                (
                    Value(i, Unit.INTEGER),
                    gpu_kind(gpu.saturated, len(gpu.shares)),
                    share.session,
                    Value(share.batch_size, Unit.INTEGER),
                    Value(share.rate_per_s, Unit.NUMBER, ",.1f"),
                    Value(gpu.duty_cycle_s, Unit.SECONDS),
                    Value(gpu.occupancy, Unit.FRACTION),
                )
            )
    gpus = Table(
        "GPUs",
        (
            Column("gpu", "GPU", numeric=True),
            Column("kind", "kind"),
            Column("session", "session", shrink=True),
            Column("batch", "batch", numeric=True),
            Column("rate", "req/s", numeric=True),
            Column("cycle", "cycle", numeric=True),
            Column("busy", "busy", numeric=True),
        ),
        tuple(gpu_rows),
        caption=PLAN_CAPTION,
    )
    by_name = {o.session: o for o in outcomes}
    checks = Table(
        "Simulated",
        (
            Column("session", "session", shrink=True),
            Column("rate", "req/s", numeric=True),
            Column("slo", "SLO", numeric=True),
            Column("requests", "requests", numeric=True),
            Column("within", "within SLO", numeric=True),
        ),
        tuple(
            (
                s.name,
                Value(s.rate_per_s, Unit.NUMBER, ",.1f"),
                Value(s.slo_s, Unit.SECONDS),
                Value(by_name[s.name].requests, Unit.INTEGER),
                Value(by_name[s.name].fraction_within, Unit.FRACTION),
            )
            for s in sessions
        ),
        caption=f"{simulated_s:g} s of seeded Poisson arrivals run through the plan",
    )
    tables: tuple[Table, ...] = (gpus, checks)
    if measured is not None:
        tables += (_measured_table(sessions, outcomes, measured, run_s),)
    summary = Fields(
        (
            ("GPUs", line(f"{len(served.gpus)} (one model per GPU at batch 1: {baseline_gpus})")),
            ("unservable", line(", ".join(served.unservable) or "none")),
            ("latency", line(_latency_sources(sessions))),
        )
    )
    data = {
        "gpus": [
            {
                "duty_cycle_s": g.duty_cycle_s,
                "saturated": g.saturated,
                "occupancy": g.occupancy,
                "shares": [dataclasses.asdict(s) for s in g.shares],
            }
            for g in served.gpus
        ],
        "unservable": list(served.unservable),
        "baseline_gpus": baseline_gpus,
        "simulated_s": simulated_s,
        "outcomes": [outcome_data(o) for o in outcomes],
    }
    if measured is not None:
        data["run_s"] = run_s
        data["measured"] = [outcome_data(o) for o in measured]
    return Document(
        kind=PLAN_DOCUMENT,
        data=data,
        sections=(Section("Serving plan", (summary, *tables)),),
    )


def _latency_sources(sessions: Sequence[Session]) -> str:
    """Where the sessions' ℓ(b) come from: measured on which hardware, or predicted for
    which from which."""
    by_source: dict[str, list[str]] = {}
    for s in sessions:
        p = s.latency
        source = (
            f"measured on {p.hardware_id}"
            if p.predicted_from is None
            else f"predicted for {p.hardware_id} from {p.predicted_from}"
        )
        by_source.setdefault(source, []).append(s.name)
    return "; ".join(f"{source} ({', '.join(names)})" for source, names in by_source.items())


MEASURED_CAPTION = (
    "one single-thread CPU worker process standing for each GPU, fed seeded Poisson"
    " arrivals in real time; latency from each request's scheduled arrival, p99 of those"
    " answered; a request not answered counts as a miss"
)


def outcome_data(o: SessionOutcome) -> dict[str, Any]:
    """A session's outcome as JSON: what a run for real adds only where it is known."""
    return {k: v for k, v in dataclasses.asdict(o).items() if v is not None}


def _measured_table(
    sessions: Sequence[Session],
    simulated: Sequence[SessionOutcome],
    measured: Sequence[SessionOutcome],
    run_s: float | None,
) -> Table:
    by_name = {o.session: o for o in simulated}
    real = {o.session: o for o in measured}
    return Table(
        "Measured",
        (
            Column("session", "session", shrink=True),
            Column("requests", "requests", numeric=True),
            Column("answered", "answered", numeric=True),
            Column("within", "within SLO", numeric=True),
            Column("p99", "p99", numeric=True),
            Column("simulated", "simulated", numeric=True),
        ),
        tuple(
            (
                s.name,
                Value(real[s.name].requests, Unit.INTEGER),
                Value(real[s.name].answered or 0, Unit.INTEGER),
                Value(real[s.name].fraction_within, Unit.FRACTION),
                Value(real[s.name].p99_s, Unit.SECONDS),
                Value(by_name[s.name].fraction_within, Unit.FRACTION),
            )
            for s in sessions
        ),
        caption=f"{run_s:g} s of the plan run for real: {MEASURED_CAPTION}"
        if run_s is not None
        else MEASURED_CAPTION,
    )
