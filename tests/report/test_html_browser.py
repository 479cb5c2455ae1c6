"""The HTML reports as a reader's browser shows them: each page opened in headless
Chromium (tests/report/browser.py), and what it drew read back from the page — never
from the renderer's input. A tiny profile, a bench run, a one-rank trace with matrix
products, a two-rank trace, a tuning run, a sweep, a latency profile, a serving plan, a
load test's rate search and CUDA graphs predicted from an H200 trace.

Without Chromium these tests skip with one line saying how to install it; in CI (`CI`
set) they fail instead."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from browser import ReportPage, chromium_browser, open_reports, uniform  # noqa: F401
from html_results import (
    ONE_WITH_MATMULS,
    TWO_RANKS,
    bench_run,
    fixed_clock,
    latency_result,
    loadtest_result,
    plan_result,
    predicted_profile,
    sweep_result,
    tiny_profile,
    trace_prediction_result,
    trace_result,
    tune_result,
)

from lightspeed.report.html import write_html

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    profile = tiny_profile()
    return {
        "profile": profile,
        "predicted": predicted_profile(profile, "h100-sxm"),
        "bench": bench_run(profile),
        "trace": trace_result(ONE_WITH_MATMULS),
        "ranks": trace_result(*TWO_RANKS),
        "tune": tune_result(),
        "sweep": sweep_result(),
        "latency": latency_result(),
        "plan": plan_result(),
        "loadtest": loadtest_result(),
        "whatif": trace_prediction_result(),
    }


@pytest.fixture(scope="module")
def pages(
    chromium: Any, results: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ReportPage]]:
    folder = tmp_path_factory.mktemp("reports")
    paths = [
        write_html(folder / f"{name}.html", doc, clock=fixed_clock())
        for name, doc in results.items()
    ]
    opened = dict(zip(results, open_reports(chromium, paths), strict=True))
    try:
        yield opened
    finally:
        for page in opened.values():
            page.close()


KINDS = (
    "profile",
    "predicted",
    "bench",
    "trace",
    "ranks",
    "tune",
    "sweep",
    "latency",
    "plan",
    "loadtest",
    "whatif",
)


@pytest.mark.parametrize("kind", KINDS)
def test_no_console_error_and_no_request_leaves_the_file(
    pages: dict[str, ReportPage], kind: str
) -> None:
    page = pages[kind]
    assert page.console_errors == []
    assert page.outside_requests == []


def _plot_png(page: ReportPage, chart_id: str) -> bytes:
    """The chart's plot area; for a sunburst, which has no axes, the area plotly gives
    its sectors (`_fullLayout._size` inside the chart's box)."""
    if page.page.locator(f"#{chart_id} .sunburstlayer").count() == 0:
        return page.plot_area_png(chart_id)
    div = page.page.locator(f"#{chart_id}")
    div.scroll_into_view_if_needed()
    box = div.bounding_box()
    size = page.page.evaluate(f"() => document.getElementById('{chart_id}')._fullLayout._size")
    assert box is not None
    clip = {
        "x": box["x"] + size["l"],
        "y": box["y"] + size["t"],
        "width": size["w"],
        "height": size["h"],
    }
    return page.page.screenshot(clip=clip)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_every_chart_draws_something_in_its_plot_area(
    pages: dict[str, ReportPage], kind: str
) -> None:
    page = pages[kind]
    charts = page.chart_ids()
    assert charts, "the page has charts"
    blank = [chart for chart in charts if uniform(_plot_png(page, chart))]
    assert blank == []


def _one_pixel(page: ReportPage, chart_id: str, axis: str) -> float:
    """The relative change of a log axis' value across one pixel of its plot area."""
    lo, hi, pixels = page.page.evaluate(
        "([id, axis]) => { const a = document.getElementById(id)._fullLayout[axis];"
        " return [a.range[0], a.range[1], a._length]; }",
        [chart_id, axis],
    )
    return float(10 ** ((hi - lo) / pixels) - 1)


def _find_point(page: ReportPage, chart_id: str, name: str) -> tuple[int, int]:
    """(trace, point) of the point whose first custom datum is `name`."""
    for t, trace in enumerate(page.traces(chart_id)):
        for i, custom in enumerate(trace["customdata"] or []):
            if custom[0] == name:
                return t, i
    raise LookupError(f"no point named {name} in #{chart_id}")


def _longest_ops(doc: dict[str, Any], n: int) -> list[dict[str, Any]]:
    placed = [op for op in doc["ops"] if op["flops"] and op["bytes"] and op.get("time_s")]
    return sorted(placed, key=lambda op: -op["time_s"])[:n]


def test_roofline_points_sit_at_their_ops_intensity_and_achieved_flops(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page, doc = pages["profile"], results["profile"]
    (chart,) = page.chart_ids("roofline")
    x_pixel, y_pixel = _one_pixel(page, chart, "xaxis"), _one_pixel(page, chart, "yaxis")
    ops = _longest_ops(doc, 3)
    assert len(ops) == 3
    for op in ops:
        name = f"{op['name'].removeprefix('aten::')} #{op['index']}"
        trace, point = _find_point(page, chart, name)
        x, y = page.point_data_coords(chart, trace, point)
        intensity = op["flops"] / op["bytes"]
        achieved = op["flops"] / op["time_s"]
        assert x == pytest.approx(intensity, rel=x_pixel), name
        assert y == pytest.approx(achieved, rel=y_pixel), name
        # The data the browser holds is the op's figures exactly.
        held = page.traces(chart)[trace]
        assert math.isclose(held["x"][point], intensity, rel_tol=1e-12)
        assert math.isclose(held["y"][point], achieved, rel_tol=1e-12)


def _apart(doc: dict[str, Any]) -> dict[str, Any]:
    """The longest op whose point lies at least 0.3 decades (about 20 px here) from every
    other point, so the pointer over it can only mean it."""

    def at(op: dict[str, Any]) -> tuple[float, float]:
        return math.log10(op["flops"] / op["bytes"]), math.log10(op["flops"] / op["time_s"])

    placed = _longest_ops(doc, len(doc["ops"]))
    for op in placed:
        x, y = at(op)
        others = [at(other) for other in placed if other is not op]
        if all(max(abs(x - a), abs(y - b)) >= 0.3 for a, b in others):
            return op
    raise LookupError("every op's point lies near another's")


def test_hovering_a_point_shows_its_op(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page = pages["profile"]
    (chart,) = page.chart_ids("roofline")
    op = _apart(results["profile"])
    name = f"{op['name'].removeprefix('aten::')} #{op['index']}"
    position = page.point_page_position(chart, *_find_point(page, chart, name))
    shown = page.hover_text(*position)
    assert name in shown
    assert f"module: {op['module'] or '(root)'}" in shown


def test_the_memory_charts_highest_value_is_the_profiles_peak(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page = pages["profile"]
    (chart,) = page.chart_ids("memory-over-step")
    assert page.plotted_max_stacked_y(chart) == results["profile"]["memory"]["peak_bytes"]


def test_the_op_table_sorts_and_filters(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page = pages["profile"].page
    rows = page.locator("table[data-table=ops] tbody tr")
    assert rows.count() == len(results["profile"]["ops"])
    headroom = "table[data-table=ops] tbody tr td:nth-child(12)"
    first = [
        float(v) for v in page.eval_on_selector_all(headroom, "(c) => c.map((d) => d.dataset.v)")
    ]
    assert first == sorted(first, reverse=True), "headroom first"
    page.click("table[data-table=ops] th[data-key=time_s]")
    times = page.eval_on_selector_all(
        "table[data-table=ops] tbody tr td:nth-child(9)", "(c) => c.map((d) => d.dataset.v)"
    )
    values = [float(v) if v is not None else -math.inf for v in times]
    assert values == sorted(values, reverse=True)
    page.fill("input.ls-filter", "optimizer")
    shown = page.eval_on_selector_all(
        "table[data-table=ops] tbody tr:not([hidden]) td:nth-child(3)",
        "(c) => c.map((d) => d.textContent)",
    )
    optimizer_ops = [op for op in results["profile"]["ops"] if op["phase"] == "optimizer"]
    assert len(shown) >= len(optimizer_ops) and "optimizer" in shown
    page.fill("input.ls-filter", "")


def test_the_legend_and_the_module_list_filter_the_roofline(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page = pages["profile"]
    (chart,) = page.chart_ids("roofline")
    names = [t["name"] for t in page.traces(chart)]
    forward = names.index("forward")
    entry = page.page.locator(f"#{chart} .legend .traces").filter(has_text="forward")
    state = f"() => document.getElementById('{chart}')._fullData[{forward}].visible"
    # Plotly waits out a double-click's delay before it toggles the entry.
    entry.click()
    page.page.wait_for_function(f"() => ({state})() === 'legendonly'", timeout=5000)
    entry.click()
    page.page.wait_for_function(f"() => ({state})() === true", timeout=5000)

    module = "0"
    page.page.select_option(f"select[data-chart={chart}]", module)
    kept = {c[1] for t in page.traces(chart) for c in (t["customdata"] or [])}
    assert kept == {module}
    expected = sum(
        1
        for op in results["profile"]["ops"]
        if op["module"] == module and op["flops"] and op["bytes"] and op.get("time_s")
    )
    assert sum(len(t["customdata"] or []) for t in page.traces(chart)) == expected
    page.page.select_option(f"select[data-chart={chart}]", "*")


def test_a_bench_report_links_each_workload_to_its_section(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page = pages["bench"]
    for result in results["bench"]["results"]:
        link = page.page.locator("table[data-table=bench] a").filter(
            has_text=result["workload"]["name"]
        )
        target = link.get_attribute("href")
        assert target is not None and page.page.locator(target).count() == 1
    # Sorting by step time puts the failed workload (no time) last, with no error.
    page.page.click("table[data-table=bench] th[data-key=step_s]")
    first = page.page.locator("table[data-table=bench] tbody tr").first
    assert first.locator("a").inner_text() == results["bench"]["results"][0]["workload"]["name"]
    assert page.console_errors == []
    (chart,) = page.chart_ids("roofline")
    ran = results["bench"]["results"][0]
    x, y = page.point_data_coords(chart, 0, 0)
    totals = ran["totals"]
    assert x == pytest.approx(
        totals["flops"] / totals["bytes"], rel=_one_pixel(page, chart, "xaxis")
    )
    assert y == pytest.approx(totals["flops"] / ran["step_s"], rel=_one_pixel(page, chart, "yaxis"))


def test_a_two_rank_trace_shows_each_ranks_waits(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page, doc = pages["ranks"], results["ranks"]
    (chart,) = page.chart_ids("collective-waits")
    for trace in page.traces(chart):
        rank = trace["name"].removeprefix("rank ")
        assert trace["y"] == [c["wait_s"][rank] for c in doc["collectives"]]
    (temporal,) = page.chart_ids("temporal")
    idle = next(t for t in page.traces(temporal) if t["name"] == "idle")
    assert idle["y"] == [r["temporal_breakdown"]["idle_s"] for r in doc["ranks"]]
    assert len(page.chart_ids("timeline")) == 2


def test_a_traces_matrix_products_sit_on_the_roofline(
    pages: dict[str, ReportPage], results: dict[str, dict[str, Any]]
) -> None:
    page = pages["trace"]
    (chart,) = page.chart_ids("roofline")
    points = results["trace"]["ranks"][0]["matmuls"]["points"]
    first = points[0]  # the longest; a trace per precision, points in the order given
    trace = [t["name"] for t in page.traces(chart)].index(first["precision"])
    point = 0
    x, y = page.point_data_coords(chart, trace, point)
    assert x == pytest.approx(first["flops"] / first["bytes"], rel=_one_pixel(page, chart, "xaxis"))
    assert y == pytest.approx(
        first["flops"] / first["time_s"], rel=_one_pixel(page, chart, "yaxis")
    )


def test_pages_have_titles(pages: dict[str, ReportPage]) -> None:
    assert pages["profile"].page.title() == "mlp-tiny: speed-of-light profile"
    assert pages["ranks"].page.title() == "Trace analysis: 2 ranks"
