"""The load test's report (`lightspeed loadgen`): its figures taken as they are from the
`load` object, the warnings that the generator lagged or requests failed, and its JSON
drawn again as the HTML page (figures and table from the JSON alone)."""

from __future__ import annotations

import json
from typing import Any

from html_results import as_json, fixed_clock, load_of, load_run, search_load

from lightspeed.document import Document, Fields, Line, Section, Table, Value
from lightspeed.report import render_json
from lightspeed.report.html import read_result, render_html
from lightspeed.report.html.loadtest_page import loadtest_page
from lightspeed.report.loadtest_report import DOCUMENT, loadtest_document


def _one_run() -> dict[str, Any]:
    run = load_run(
        50.0, ok=495, within=490, dropped=5, latency_s=(0.012, 0.034, 0.078), lower_bound=0.958
    )
    return load_of([run])


def _lagging_with_errors() -> dict[str, Any]:
    run = load_run(
        80.0,
        ok=760,
        within=700,
        errors=40,
        cpu=0.95,
        lag_s=0.02,
        details=("error (HTTP 500): boom", "error: timed out"),
    )
    return load_of([run])


def _section(doc: Document) -> Section:
    section = doc.sections[0]
    assert isinstance(section, Section)
    return section


def _fields(doc: Document) -> dict[str, Line]:
    fields = next(b for b in _section(doc).blocks if isinstance(b, Fields))
    return dict(fields.rows)


def _table(doc: Document) -> Table:
    return next(b for b in _section(doc).blocks if isinstance(b, Table))


def _raws(spans: Line) -> list[object]:
    return [s.raw for s in spans if isinstance(s, Value)]


def _column(table: Table, key: str) -> list[object]:
    i = [c.key for c in table.columns].index(key)
    cells = [row[i] for row in table.rows]
    return [c.raw if isinstance(c, Value) else c for c in cells]


def test_one_run_gives_its_figures_as_measured() -> None:
    load = _one_run()
    doc = loadtest_document(load)
    assert doc.kind == DOCUMENT == "load-test"
    assert doc.data == {"load": load}
    assert doc.warnings == ()
    fields = _fields(doc)
    assert "".join(map(str, fields["target"])) == "http://127.0.0.1:8000/predict (mlp-tiny)"
    assert "slo-aware batching, max batch 32, batch timeout 5 ms" in fields["serving"]
    assert _raws(fields["SLO"]) == [0.1]
    assert _raws(fields["throughput"]) == [49.5]
    assert _raws(fields["goodput"]) == [49.0]
    assert _raws(fields["within SLO"]) == [0.98, 0.958]
    assert _raws(fields["latency"]) == [0.012, 0.034, 0.078]
    assert _raws(fields["dropped, errors"]) == [5, 0]
    table = _table(doc)
    assert "passed" not in [c.key for c in table.columns]
    assert _column(table, "offered") == [50.0]
    assert _column(table, "p99") == [0.078]
    assert _column(table, "dropped") == [5]


def test_a_search_gives_the_highest_rate_and_its_probes_by_rate() -> None:
    doc = loadtest_document(search_load())
    fields = _fields(doc)
    assert _raws(fields["highest rate"]) == [141.42]
    assert _raws(fields["lower bound"]) == [0.9951]
    assert "no:" in "".join(map(str, fields["converged"]))
    assert _raws(fields["probes"]) == [4]
    assert _raws(fields["at that rate: within SLO"]) == [1412 / 1414, 0.9951]
    table = _table(doc)
    assert _column(table, "offered") == [100.0, 141.4, 168.2, 200.0]
    assert _column(table, "passed") == ["pass", "pass", "fail", "fail"]
    assert _column(table, "goodput") == [99.9, 141.2, 160.0, 150.0]
    assert doc.warnings == ()


def test_a_search_that_found_no_rate_says_so() -> None:
    load = search_load()
    found = load["max_rate"]
    found.update(rate_per_s=None, lower_bound=None, result=None)
    for probe in found["probes"]:
        probe["passed"] = False
    fields = _fields(loadtest_document(load))
    assert "none: every rate missed 0.99" in "".join(map(str, fields["highest rate"]))
    assert _raws(fields["highest rate"]) == [100.0]
    assert "lower bound" not in fields


def test_a_lagging_generator_and_errors_are_warned() -> None:
    doc = loadtest_document(_lagging_with_errors())
    lag, errors = doc.warnings
    assert lag.startswith("the load generator lagged at 80.0 req/s: up to 95% of a core busy")
    assert "20 ms late at p99 against an SLO of 100 ms" in lag
    assert "the server's figures are pessimistic" in lag
    assert errors.startswith("40 of 800 requests failed (at 80.0 req/s): error (HTTP 500): boom;")
    assert "error: timed out" in errors
    # The lag alone warns (over 10% of the SLO), and the CPU alone.
    lag_only = load_of([load_run(10.0, ok=100, within=100, lag_s=0.011)])
    cpu_only = load_of([load_run(10.0, ok=100, within=100, cpu=0.9)])
    calm = load_of([load_run(10.0, ok=100, within=100, cpu=0.89, lag_s=0.01)])
    assert len(loadtest_document(lag_only).warnings) == 1
    assert len(loadtest_document(cpu_only).warnings) == 1
    assert loadtest_document(calm).warnings == ()


def test_the_json_keeps_the_load_whole_and_the_warnings() -> None:
    load = _lagging_with_errors()
    obj = as_json(loadtest_document(load))
    assert obj["document"] == "load-test"
    assert obj["load"] == json.loads(json.dumps(load))
    assert len(obj["warnings"]) == 2


def _figure(page: Any, kind: str) -> dict[str, Any]:
    return {t["name"]: t for t in page.figures[_chart_id(page, kind)]["data"]}


def _chart_id(page: Any, kind: str) -> str:
    order = ["latency-throughput", "goodput"]
    return f"ls-chart-{order.index(kind) + 1}"


def test_the_page_is_drawn_from_the_json_alone(tmp_path: Any) -> None:
    path = tmp_path / "load.json"
    render_json.write(path, render_json.render(loadtest_document(search_load())))
    doc = read_result(path)
    html = render_html(doc, clock=fixed_clock())
    assert 'data-chart="latency-throughput"' in html and 'data-chart="goodput"' in html
    assert "load test of 4 run(s)" in html
    table = html.split('data-table="runs"', 1)[1]
    for shown in ("141.4", "168.2", "99.9%", "900 ms", ">pass<", ">fail<"):
        assert shown in table
    page = loadtest_page(doc)
    latency = _figure(page, "latency-throughput")
    assert set(latency) == {"p50", "p90", "p99", "SLO"}
    assert latency["p99"]["x"] == [100.0, 141.4, 168.2, 190.0]  # by throughput
    assert latency["p99"]["y"] == [0.04, 0.04, 0.3, 0.9]
    assert latency["SLO"]["y"] == [0.1, 0.1]
    rates = _figure(page, "goodput")
    goodput = rates["goodput (probes: ● pass, ✕ fail)"]
    assert goodput["x"] == [100.0, 141.4, 168.2, 200.0]
    assert goodput["y"] == [99.9, 141.2, 160.0, 150.0]
    assert goodput["text"] == ["pass", "pass", "fail", "fail"]
    assert rates["throughput"]["y"] == [100.0, 141.4, 168.2, 190.0]
    assert rates["ideal (y = x)"]["x"] == rates["ideal (y = x)"]["y"] == [0, 200.0]


def test_one_runs_page_shows_its_warnings_and_a_run_without_replies() -> None:
    load = _lagging_with_errors()
    load["runs"].append(load_run(400.0, ok=0, within=0, errors=4000, latency_s=None))
    html = render_html(as_json(loadtest_document(load)), clock=fixed_clock())
    assert "the load generator lagged at 80.0 req/s" in html
    assert "error (HTTP 500): boom" in html
    page = loadtest_page(as_json(loadtest_document(load)))
    assert _figure(page, "latency-throughput")["p50"]["y"] == [None, 0.01]
    assert "goodput" in _figure(page, "goodput")
