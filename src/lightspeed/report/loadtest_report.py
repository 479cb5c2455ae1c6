"""The report of a load test (`lightspeed loadgen`): what was driven and how, each
open-loop run's throughput, goodput, share within the SLO (with its Clopper–Pearson lower
bound) and latency tail, the search for the highest rate within the SLO, and warnings
where the generator, not the server, set the figures; and the JSON it round-trips through.

It takes the `load` object `lightspeed.serving.load.load_data` makes (a plain dict, as
the report layer sits below serving), and keeps it whole as the document's data, so the
HTML page is drawn from the JSON alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.document import (
    Column,
    Document,
    Fields,
    Line,
    Section,
    Table,
    Unit,
    Value,
    format_value,
    line,
)

DOCUMENT = "load-test"

# The generator is the bottleneck at or above this share of one core, or when its p99
# start lag exceeds this share of the SLO.
BUSY_CPU = 0.9
LAG_OF_SLO = 0.1
# Drop and error descriptions a warning quotes.
DETAILS_QUOTED = 3

COLUMNS = (
    Column("offered", "offered req/s", numeric=True),
    Column("throughput", "throughput", numeric=True),
    Column("goodput", "goodput", numeric=True),
    Column("within", "within SLO", numeric=True),
    Column("p50", "p50", numeric=True),
    Column("p90", "p90", numeric=True),
    Column("p99", "p99", numeric=True),
    Column("dropped", "dropped", numeric=True),
    Column("errors", "errors", numeric=True),
    Column("cpu", "gen CPU", numeric=True, optional=True),
    Column("lag", "lag p99", numeric=True, optional=True),
)
PASSED = Column("passed", "target")

CAPTION = (
    "offered: requests scheduled over the run's duration; throughput: OK replies a second;"
    " goodput: replies within the SLO a second; latency from each request's scheduled time;"
    " gen CPU: the load generator's share of one core; lag p99: how late requests were sent"
    " behind their schedule, at p99"
)


def target_name(target: Mapping[str, Any]) -> str:
    """What was driven, in a few words: the URL, or the model served in this process."""
    if target.get("in_process"):
        return f"{target.get('model') or 'a model'}, served in this process"
    url = str(target.get("url") or "an endpoint")
    model = target.get("model")
    return f"{url} ({model})" if model else url


def serving_line(target: Mapping[str, Any]) -> str | None:
    """How the server batches (policy, max batch, batch timeout), where it says."""
    parts = []
    if target.get("policy"):
        parts.append(f"{target['policy']} batching")
    if target.get("max_batch") is not None:
        parts.append(f"max batch {target['max_batch']}")
    if target.get("batch_timeout_ms") is not None:
        parts.append(f"batch timeout {target['batch_timeout_ms']:g} ms")
    return ", ".join(parts) or None


def rate(value: float | None) -> Value:
    """A rate in requests a second."""
    return Value(value, Unit.NUMBER, ",.1f", suffix=" req/s")


def is_search(load: Mapping[str, Any]) -> bool:
    """Whether the result is a search for the highest rate rather than one run."""
    return load.get("max_rate") is not None


def runs_in_order(load: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool | None]]:
    """Each run with whether it reached the search's target (None for a lone run): a
    search's probes by their rate, else the runs as made."""
    found = load.get("max_rate")
    if found is None:
        return [(r, None) for r in load["runs"]]
    probes = sorted(
        found["probes"], key=lambda p: (p["rate_per_s"], p["result"]["offered_rate_per_s"])
    )
    return [(p["result"], bool(p["passed"])) for p in probes]


def run_cells(run: Mapping[str, Any], passed: bool | None = None) -> tuple[Value | str, ...]:
    """One row of the runs table, under `run_columns`."""
    cells: tuple[Value | str, ...] = (
        Value(run["offered_rate_per_s"], Unit.NUMBER, ",.1f"),
        Value(run["throughput_per_s"], Unit.NUMBER, ",.1f"),
        Value(run["goodput_per_s"], Unit.NUMBER, ",.1f"),
        Value(run["fraction_within"], Unit.FRACTION),
        Value(run["p50_s"], Unit.SECONDS),
        Value(run["p90_s"], Unit.SECONDS),
        Value(run["p99_s"], Unit.SECONDS),
        Value(run["dropped"], Unit.INTEGER),
        Value(run["errors"], Unit.INTEGER),
        Value(run["generator_cpu"], Unit.FRACTION),
        Value(run["lag_p99_s"], Unit.SECONDS),
    )
    if passed is None:
        return cells
    return (*cells, "pass" if passed else "fail")


def run_columns(load: Mapping[str, Any]) -> tuple[Column, ...]:
    """The runs table's columns: with a search, whether each probe reached the target."""
    return (*COLUMNS, PASSED) if is_search(load) else COLUMNS


def run_rows(load: Mapping[str, Any]) -> tuple[tuple[Value | str, ...], ...]:
    """The runs table's rows, in `runs_in_order`."""
    return tuple(run_cells(run, passed) for run, passed in runs_in_order(load))


def caption(load: Mapping[str, Any]) -> str:
    """The runs table's caption; with a search, what a probe's target was."""
    found = load.get("max_rate")
    if found is None:
        return CAPTION
    return (
        f"{CAPTION}; target: whether at least {found['target']:.4g} of the requests were"
        " answered within the SLO (probes by their rate)"
    )


def _text(spans: Line) -> str:
    return "".join(s if isinstance(s, str) else format_value(s) for s in spans)


def run_summary(run: Mapping[str, Any]) -> list[tuple[str, Line]]:
    """One run's figures: offered rate, throughput, goodput, share within the SLO with its
    99 % lower bound, the latency percentiles, drops and errors."""
    return [
        (
            "offered",
            line(
                rate(run["offered_rate_per_s"]),
                f" ({run['offered']} requests over ",
                Value(run["duration_s"], Unit.SECONDS),
                ")",
            ),
        ),
        ("throughput", line(rate(run["throughput_per_s"]))),
        ("goodput", line(rate(run["goodput_per_s"]))),
        (
            "within SLO",
            line(
                Value(run["fraction_within"], Unit.FRACTION),
                f" ({run['within_slo']} of {run['offered']}; at least ",
                Value(run["within_lower_bound_99"], Unit.FRACTION),
                " at 99% confidence, Clopper–Pearson)",
            ),
        ),
        (
            "latency",
            line(
                "p50 ",
                Value(run["p50_s"], Unit.SECONDS),
                ", p90 ",
                Value(run["p90_s"], Unit.SECONDS),
                ", p99 ",
                Value(run["p99_s"], Unit.SECONDS),
            ),
        ),
        (
            "dropped, errors",
            line(Value(run["dropped"], Unit.INTEGER), ", ", Value(run["errors"], Unit.INTEGER)),
        ),
    ]


def search_summary(found: Mapping[str, Any]) -> list[tuple[str, Line]]:
    """A search's outcome: the highest rate that kept the target within the SLO, the
    lower bound at it, whether the search converged, and how many probes it ran."""
    probes = found["probes"]
    if found["rate_per_s"] is None:
        lowest = min((p["rate_per_s"] for p in probes), default=None)
        highest: Line = line(
            f"none: every rate missed {found['target']:.4g} within the SLO, down to ",
            rate(lowest),
        )
    else:
        highest = line(
            rate(found["rate_per_s"]),
            f" kept at least {found['target']:.4g} of requests within the SLO",
        )
    rows: list[tuple[str, Line]] = [("highest rate", highest)]
    if found["lower_bound"] is not None:
        rows.append(
            (
                "lower bound",
                line(
                    Value(found["lower_bound"], Unit.FRACTION),
                    f" within the SLO at {found['confidence']:.0%} confidence (Clopper–Pearson)",
                ),
            )
        )
    rows.append(
        (
            "converged",
            line(
                "yes: a failing rate lies within the tolerance above it"
                if found["converged"]
                else "no: the probe budget ran out before the bracket closed"
            ),
        )
    )
    rows.append(("probes", line(Value(len(probes), Unit.INTEGER))))
    return rows


def summary_rows(load: Mapping[str, Any]) -> list[tuple[str, Line]]:
    """The summary: what was driven, the SLO and arrivals; then one run's figures, or a
    search's outcome and the figures of its highest passing run."""
    target = load["target"]
    rows: list[tuple[str, Line]] = [("target", line(target_name(target)))]
    batching = serving_line(target)
    if batching is not None:
        rows.append(("serving", line(batching)))
    rows += [
        ("SLO", line(Value(load["slo_s"], Unit.SECONDS))),
        (
            "arrivals",
            line(
                f"{load['arrivals']}, open loop, ",
                Value(load["duration_s"], Unit.SECONDS),
                f" a run, seed {load['seed']}",
            ),
        ),
    ]
    found = load.get("max_rate")
    if found is not None:
        rows += search_summary(found)
        if found["result"] is not None:
            rows += [(f"at that rate: {k}", v) for k, v in run_summary(found["result"])]
    elif load["runs"]:
        rows += run_summary(load["runs"][-1])
    return rows


def summary_text(load: Mapping[str, Any]) -> list[tuple[str, str]]:
    """`summary_rows` as plain text, for the HTML page's fields."""
    return [(label, _text(spans)) for label, spans in summary_rows(load)]


def lagged(run: Mapping[str, Any]) -> bool:
    """Whether the generator, not the server, may have set this run's figures: its CPU at
    `BUSY_CPU` of a core, or its p99 start lag beyond `LAG_OF_SLO` of the SLO."""
    return bool(run["generator_cpu"] >= BUSY_CPU or run["lag_p99_s"] > LAG_OF_SLO * run["slo_s"])


def load_warnings(load: Mapping[str, Any]) -> tuple[str, ...]:
    """Why not to trust the figures as they stand: a generator that lagged, and errors."""
    runs = [run for run, _ in runs_in_order(load)]
    warnings = []
    slow = [r for r in runs if lagged(r)]
    if slow:
        at = ", ".join(f"{r['offered_rate_per_s']:,.1f}" for r in slow)
        cpu = max(r["generator_cpu"] for r in slow)
        lag = max(r["lag_p99_s"] for r in slow)
        shared = (
            " (in process, the server's work counts in it too)"
            if load["target"].get("in_process")
            else ""
        )
        warnings.append(
            f"the load generator lagged at {at} req/s: up to {cpu:.0%} of a core busy{shared},"
            f" requests sent up to {format_value(Value(lag, Unit.SECONDS))} late at p99 against an"
            f" SLO of {format_value(Value(load['slo_s'], Unit.SECONDS))}; latency counts from each"
            " request's scheduled time, so the server's figures are pessimistic: give the"
            " generator its own cores or offer less."
        )
    failed = [r for r in runs if r["errors"]]
    if failed:
        errors = sum(r["errors"] for r in failed)
        offered = sum(r["offered"] for r in failed)
        at = ", ".join(f"{r['offered_rate_per_s']:,.1f}" for r in failed)
        details = list(dict.fromkeys(d for r in failed for d in r["error_details"]))
        first = "; ".join(details[:DETAILS_QUOTED])
        warnings.append(
            f"{errors} of {offered} requests failed (at {at} req/s)"
            + (f": {first}" if first else "")
            + "; errors count as misses of the SLO."
        )
    return tuple(warnings)


def loadtest_document(load: Mapping[str, Any]) -> Document:
    """The load test: what was driven, one run's figures or a search's outcome, every
    run, and the warnings that the generator lagged or requests failed."""
    table = Table(
        "Runs",
        run_columns(load),
        run_rows(load),
        caption=caption(load),
    )
    summary = Fields(tuple(summary_rows(load)))
    title = "Highest rate within the SLO" if is_search(load) else "Load test"
    return Document(
        kind=DOCUMENT,
        data={"load": dict(load)},
        sections=(Section(title, (summary, table)),),
        warnings=load_warnings(load),
    )
