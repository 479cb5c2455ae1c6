"""The browser harness itself, on toy pages plotly's Python package writes: it reads
back where points are plotted, what a hover shows, what the page asked of the network
and the console, whether a plot area is blank, and the top of a stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from browser import (
    INSTALL_HINT,
    ReportNotDrawn,
    ReportPage,
    chromium_browser,  # noqa: F401 (registers the `chromium` fixture)
    find_chromium,
    missing_browser,
    open_report,
    uniform,
)

if TYPE_CHECKING:  # playwright may be missing: the `chromium` fixture then skips
    from playwright.sync_api import Browser

# The log-log scatter: both axes span 10**0 .. 10**2.5 over a 600 px plot area.
DECADES = 2.5
PLOT_PX = 600
MARGIN_PX = 50
# One pixel on these axes is a factor 10**(2.5/600) = 1.0096, i.e. 0.96 %: the harness
# must find each point within the pixel it is drawn on.
ONE_PIXEL_REL = 10 ** (DECADES / PLOT_PX) - 1
NAMES = ["alpha", "beta", "gamma", "delta", "epsilon"]
XS = [1.5, 3.0, 30.0, -2.0, 300.0]  # -2 cannot sit on a log axis: plotly drops it
YS = [2.0, 20.0, 5.0, 50.0, 200.0]


def chart_div(fig: go.Figure, div_id: str, kind: str, plotlyjs: bool | str) -> str:
    html: str = pio.to_html(fig, include_plotlyjs=plotlyjs, full_html=False, div_id=div_id)
    tagged = f'class="plotly-graph-div ls-chart" data-chart="{kind}"'
    return html.replace('class="plotly-graph-div"', tagged, 1)


def write_page(
    path: Path, *charts: tuple[str, str, go.Figure], extra: str = "", plotlyjs: str = "inline"
) -> Path:
    """A page of charts `(div_id, kind, figure)`, plotly's JS (inline, or the CDN's)
    with the first, then `extra` HTML."""
    include = {"inline": True, "cdn": "cdn"}[plotlyjs]
    divs = "".join(
        chart_div(fig, div_id, kind, include if i == 0 else False)
        for i, (div_id, kind, fig) in enumerate(charts)
    )
    head = "<!DOCTYPE html><html><head><meta charset='utf-8'></head>"
    path.write_text(f"{head}<body>{divs}{extra}</body></html>")
    return path


def log_scatter() -> go.Figure:
    fig = go.Figure(
        go.Scatter(
            x=np.array(XS),
            y=np.array(YS),
            mode="markers",
            name="runs",
            text=NAMES,
            hovertemplate="%{text}<extra></extra>",
        )
    )
    axis = {"type": "log", "range": [0, DECADES]}
    side_px = PLOT_PX + 2 * MARGIN_PX
    margin = dict.fromkeys("lrtb", MARGIN_PX)
    fig.update_layout(width=side_px, height=side_px, margin=margin, xaxis=axis, yaxis=axis)
    return fig


def bars() -> go.Figure:
    # numpy arrays reach the page as base64 typed arrays, 2-D ones with a shape
    y = np.array([3.0, 6.0, 1.0])
    customdata = np.array([[1, 2], [3, 4], [5, 6]])
    return go.Figure(go.Bar(x=["fwd", "bwd", "opt"], y=y, name="time_s", customdata=customdata))


def stacked_area() -> go.Figure:
    layers = {"matmul": [5, 1, 2], "attention": [1, 4, 1], "other": [0, 4, 1]}
    return go.Figure(
        [go.Scatter(x=[1, 2, 3], y=y, name=name, stackgroup="time") for name, y in layers.items()]
    )


def all_dropped() -> go.Figure:
    """A chart with data of which nothing can be drawn: no x is positive on its log axis."""
    fig = go.Figure(go.Scatter(x=[-1.0, 0.0], y=[1.0, 2.0], mode="lines+markers"))
    return fig.update_xaxes(type="log")


@pytest.fixture(scope="module")
def report(chromium: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportPage]:
    """One page of five charts, opened once: the tests below only read it."""
    path = write_page(
        tmp_path_factory.mktemp("report") / "report.html",
        ("scatter", "scatter", log_scatter()),
        ("bars", "bar", bars()),
        ("stack", "area", stacked_area()),
        ("empty", "bar", go.Figure()),
        ("dropped", "scatter", all_dropped()),
    )
    with open_report(chromium, path) as opened:
        yield opened


def test_a_clean_page_reports_nothing_outside(report: ReportPage) -> None:
    assert report.console_errors == []
    assert report.outside_requests == []


def test_charts_are_listed_in_page_order_and_by_kind(report: ReportPage) -> None:
    assert report.chart_ids() == ["scatter", "bars", "stack", "empty", "dropped"]
    assert report.chart_ids("bar") == ["bars", "empty"]
    assert report.chart_ids("pie") == []


def test_traces_come_back_as_plain_lists(report: ReportPage) -> None:
    assert report.traces("bars") == [
        {
            "name": "time_s",
            "type": "bar",
            "x": ["fwd", "bwd", "opt"],
            "y": [3.0, 6.0, 1.0],
            "customdata": [[1, 2], [3, 4], [5, 6]],
            "text": None,
        }
    ]
    (scatter,) = report.traces("scatter")
    assert (scatter["x"], scatter["y"], scatter["text"]) == (XS, YS, NAMES)


def test_points_are_read_back_where_they_are_plotted(report: ReportPage) -> None:
    for i in (0, 2, 4):  # 4 comes after the dropped point 3: matched by index, not order
        x, y = report.point_data_coords("scatter", 0, i)
        assert x == pytest.approx(XS[i], rel=ONE_PIXEL_REL)
        assert y == pytest.approx(YS[i], rel=ONE_PIXEL_REL)
    with pytest.raises(LookupError, match="point 3 of trace 0 of #scatter is not drawn"):
        report.point_data_coords("scatter", 0, 3)


def test_hovering_a_point_shows_its_name(report: ReportPage) -> None:
    for i in (2, 4, 0):
        assert report.hover_text(*report.point_page_position("scatter", 0, i)) == NAMES[i]


def test_an_empty_plot_area_is_uniform_and_a_drawn_one_is_not(report: ReportPage) -> None:
    assert uniform(report.plot_area_png("empty"))
    assert uniform(report.plot_area_png("dropped"))
    assert not uniform(report.plot_area_png("empty", grid=True))  # grid lines are not data
    assert not uniform(report.plot_area_png("bars"))


def test_max_stacked_y_is_the_tallest_total(report: ReportPage) -> None:
    # totals at x = 1, 2, 3: 5+1+0 = 6, 1+4+4 = 9, 2+1+1 = 4; no single layer reaches 9
    assert report.plotted_max_stacked_y("stack") == 9
    with pytest.raises(LookupError, match="#bars has no visible stacked trace"):
        report.plotted_max_stacked_y("bars")


def test_outside_requests_are_recorded_and_aborted(chromium: Browser, tmp_path: Path) -> None:
    page = write_page(
        tmp_path / "report.html",
        ("bars", "bar", bars()),
        extra='<script src="https://cdn.example.com/x.js"></script><img src="other.png">'
        '<script>new WebSocket("wss://live.example.com/feed")</script>',
    )
    with open_report(chromium, page, timeout_s=5) as opened:
        assert opened.chart_ids() == ["bars"]
        assert sorted(opened.outside_requests) == [
            (tmp_path / "other.png").as_uri(),
            "https://cdn.example.com/x.js",
            "wss://live.example.com/feed",
        ]


def test_plotly_from_a_cdn_fails_fast_naming_the_request(chromium: Browser, tmp_path: Path) -> None:
    page = write_page(tmp_path / "report.html", ("bars", "bar", bars()), plotlyjs="cdn")
    with pytest.raises(ReportNotDrawn, match=r"Plotly is not defined.*https://cdn\.plot\.ly/"):
        open_report(chromium, page, timeout_s=5)


def test_a_chart_div_plotly_never_drew_fails_after_the_timeout(
    chromium: Browser, tmp_path: Path
) -> None:
    never = '<div class="ls-chart" id="never"></div>'
    page = write_page(tmp_path / "report.html", ("bars", "bar", bars()), extra=never)
    with pytest.raises(ReportNotDrawn, match=r"charts not drawn in 0\.5 s"):
        open_report(chromium, page, timeout_s=0.5)


def test_console_and_uncaught_errors_are_recorded(chromium: Browser, tmp_path: Path) -> None:
    scripts = "<script>console.error('x'); console.log('fine')</script>"
    scripts += "<script>throw new Error('boom')</script>"
    page = write_page(tmp_path / "report.html", ("bars", "bar", bars()), extra=scripts)
    with open_report(chromium, page) as opened:
        assert opened.console_errors == ["x", "Error: boom"]


def test_chromium_is_found_by_variable_then_by_name() -> None:
    on_path = {"google-chrome": "/usr/bin/google-chrome", "/opt/c/chrome": "/opt/c/chrome"}.get
    assert find_chromium({}, on_path) == "/usr/bin/google-chrome"
    assert find_chromium({"LIGHTSPEED_CHROMIUM": "/opt/c/chrome"}, on_path) == "/opt/c/chrome"
    assert find_chromium({"LIGHTSPEED_CHROMIUM": "/nowhere"}, on_path) is None
    assert find_chromium({}, {}.get) is None


@pytest.mark.parametrize(
    ("environ", "outcome"),
    [
        ({}, pytest.skip.Exception),
        ({"CI": ""}, pytest.skip.Exception),
        ({"CI": "true"}, pytest.fail.Exception),
    ],
)
def test_a_missing_browser_skips_except_under_ci(
    environ: dict[str, str], outcome: type[BaseException]
) -> None:
    with pytest.raises(outcome) as raised:
        missing_browser(INSTALL_HINT, environ)
    expected = "Chromium not found: apt-get install chromium (Debian) to run the browser tests"
    assert str(raised.value) == expected
