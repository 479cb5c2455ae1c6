"""The report of `lightspeed sweep`: the search, the best trial, the sweep's wall time
beside the serial sweep's, and every trial's hyper-parameters and final loss."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed.document import (
    Column,
    Document,
    Fields,
    Notes,
    Section,
    Style,
    Table,
    Unit,
    Value,
    line,
)
from lightspeed.facts.sweep import Sweep, Trial
from lightspeed.report.timing_report import workload_data

DOCUMENT = "sweep"


def sweep_document(found: Sweep) -> Document:
    """The sweep's summary, then its trials, best first."""
    data = sweep_data(found)
    names = [d.name for d in found.space]
    table = Table(
        title="Trials: best first",
        columns=trial_columns(names),
        rows=tuple(trial_cells(t, names, found.best) for t in _ranked(data["trials"])),
        caption="loss: each trial's training loss at its last step; group: the fused job"
        f" that trained it ({found.k} trials a job); diverged: a loss or gradient that was"
        " not finite, after which the trial stopped updating",
        framed=True,
    )
    blocks: list[Any] = [Fields(tuple(summary_rows(data))), table]
    if found.serial is not None:
        blocks.append(Notes((serial_note(data),), title="The serial sweep, measured"))
    return Document(kind=DOCUMENT, data=data, sections=(Section("Sweep", tuple(blocks)),))


def sweep_data(found: Sweep) -> dict[str, Any]:
    """The sweep as its JSON object."""
    serial = found.serial
    return {
        "workload": workload_data(found.workload),
        "space": [d.text for d in found.space],
        "k": found.k,
        "steps": found.steps,
        "sampler": found.sampler,
        "seed": found.seed,
        "trials": [
            {"number": t.number, "group": t.group, "params": dict(t.params), "loss": t.loss}
            for t in found.trials
        ],
        "best": found.best,
        "wall_s": found.wall_s,
        "driver_s": found.driver_s,
        "serial": None
        if serial is None
        else {
            "trials": list(serial.trials),
            "seconds": list(serial.seconds),
            "losses": list(serial.losses),
            "fused_losses": [_loss_of(found.trials, n) for n in serial.trials],
        },
        "serial_estimate_s": found.serial_estimate_s,
        "speedup": found.speedup,
        "failure": found.failure,
    }


def summary_rows(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The summary's fields, from the sweep's JSON object."""
    trials = data["trials"]
    best = next((t for t in trials if t["number"] == data["best"]), None)
    diverged = sum(1 for t in trials if t["loss"] is None)
    rows: list[tuple[str, Any]] = [
        ("workload", line(data["workload"]["name"])),
        *(
            [("stopped", line(Value(data["failure"], style=Style.ERROR)))]
            if data.get("failure")
            else []
        ),
        ("search space", line(" ".join(data["space"]))),
        (
            "trials",
            line(
                f"{len(trials)} of {data['steps']} steps, {data['k']} at a time as one fused"
                f" job; {diverged} diverged; {data['sampler']}, seed {data['seed']}"
            ),
        ),
        (
            "best",
            line(
                Value(f"trial {best['number']}: {params_text(best['params'])}", style=Style.BOLD),
                ", loss ",
                Value(best["loss"], Unit.NUMBER, ".4g"),
            )
            if best is not None
            else line(Value("none: every trial diverged", style=Style.WARNING)),
        ),
        ("wall time", line(Value(data["wall_s"], Unit.SECONDS), " fused")),
    ]
    serial = data.get("serial_estimate_s")
    if serial is not None:
        rows.append(
            (
                "serial sweep",
                line(
                    Value(serial, Unit.SECONDS),
                    " estimated: the trials one at a time, ",
                    Value(data["speedup"], Unit.NUMBER, ".2f", suffix="×", style=Style.BOLD),
                    " the fused sweep's time",
                ),
            )
        )
    return rows


def trial_columns(names: Sequence[str]) -> tuple[Column, ...]:
    """The trials table's columns: the trial, its group, each hyper-parameter, its loss."""
    return (
        Column("number", "trial", numeric=True),
        Column("group", "group", numeric=True, optional=True),
        *(Column(f"params.{n}", n, numeric=True) for n in names),
        Column("loss", "loss", numeric=True),
    )


def trial_cells(
    trial: Mapping[str, Any], names: Sequence[str], best: int | None
) -> tuple[Value | str, ...]:
    """One trial's row, from its JSON object, in `trial_columns` order."""
    mark = Style.BOLD if trial["number"] == best else Style.PLAIN
    return (
        Value(trial["number"], Unit.INTEGER, style=mark),
        Value(trial["group"], Unit.INTEGER),
        *(Value(trial["params"].get(n), Unit.NUMBER, ".4g") for n in names),
        Value(trial["loss"], Unit.NUMBER, ".4g", style=mark)
        if trial["loss"] is not None
        else Value("diverged", style=Style.WARNING),
    )


def params_text(params: Mapping[str, float]) -> str:
    """Hyper-parameters as "lr=0.00312, weight_decay=0.01"."""
    return ", ".join(f"{name}={value:.4g}" for name, value in params.items())


def _ranked(trials: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Best first; diverged trials last, in the order they ran."""
    return sorted(trials, key=lambda t: (t["loss"] is None, t["loss"] or 0.0, t["number"]))


def _loss_of(trials: Sequence[Trial], number: int) -> float | None:
    return next((t.loss for t in trials if t.number == number), None)


def serial_note(data: Mapping[str, Any]) -> str:
    """How the serial sweep's time was measured, and how the lone runs' losses agree
    with the fused ones."""
    serial = data["serial"]
    seconds = serial["seconds"]
    mean = sum(seconds) / len(seconds)
    pairs = [
        (f, a)
        for f, a in zip(serial["fused_losses"], serial["losses"], strict=True)
        if f is not None and a is not None
    ]
    agree = (
        f"; their losses alone and fused differ by at most"
        f" {max(abs(f - a) / max(abs(a), 1e-30) for f, a in pairs):.1e} relative"
        if pairs
        else ""
    )
    return (
        f"trials {', '.join(str(n) for n in serial['trials'])} run again one at a time, each"
        f" the workload's own model with PyTorch's optimizer: {mean * 1e3:.1f} ms a trial on"
        f" average × {len(data['trials'])} trials + the driver's"
        f" {data['driver_s'] * 1e3:.1f} ms{agree}"
    )
