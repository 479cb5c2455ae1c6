"""Open a self-contained HTML report in headless Chromium and read back what it drew.

The report's charts are `<div class="ls-chart" id=...>` on which `Plotly.newPlot` ran,
so each div carries plotly's own state: `gd.data` (the traces as given), `gd.calcdata`
(what plotly computed for drawing) and `gd._fullLayout` (axes, with their pixel<->data
maps). These helpers read that state and the drawn SVG, so a test checks what a reader
sees, not what the renderer meant to draw.

Usage in a test module (the import is what registers the fixture with pytest):

    from browser import chromium_browser, open_report  # noqa: F401 (the `chromium` fixture)

    def test_x(chromium, tmp_path):
        with open_report(chromium, tmp_path / "report.html") as report:
            assert report.outside_requests == []

Needs the `playwright` and `pillow` packages and a Chromium on the machine; never
`playwright install` (it downloads a browser): the system Chromium is launched by path.
"""

from __future__ import annotations

import io
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import (
        Browser,
        BrowserContext,
        ConsoleMessage,
        Error,
        FloatRect,
        Page,
        Route,
        WebSocketRoute,
    )

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
INSTALL_HINT = "Chromium not found: apt-get install chromium (Debian) to run the browser tests"
PLAYWRIGHT_HINT = "playwright not installed: pip install playwright to run the browser tests"
# As root on a machine with no network: no sandbox, no GPU, nothing phoning home.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
# Loading is parsing (plotly's JS is ~5 MB) and cannot wait on the network, which is
# cut off; drawing is plotly's work after the load event.
LOAD_TIMEOUT_S = 30.0
DRAW_TIMEOUT_S = 10.0
HOVER_TIMEOUT_S = 2.0
# URL schemes a self-contained page may use without leaving the file.
INLINE_SCHEMES = ("data:", "blob:", "about:", "javascript:")


class ReportNotDrawn(AssertionError):
    """The report's charts did not all draw; the message lists what the page reported."""


def find_chromium(
    environ: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
) -> str | None:
    """Path of the Chromium to launch: `LIGHTSPEED_CHROMIUM` when set (and nothing else
    then), else the first of `CHROMIUM_NAMES` on PATH; None when there is none."""
    chosen = environ.get("LIGHTSPEED_CHROMIUM")
    if chosen:
        return which(chosen)
    return next((path for name in CHROMIUM_NAMES if (path := which(name))), None)


def missing_browser(reason: str, environ: Mapping[str, str] = os.environ) -> NoReturn:
    """Skip the test with `reason`, or fail it when running under CI (`CI` set), where a
    skipped browser test would hide that the report was never checked."""
    if environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module", name="chromium")
def chromium_browser() -> Iterator[Browser]:
    """Headless Chromium for one test module (playwright gives it a fresh temporary
    user-data dir, removed when it closes). Per module, not per session: each module
    that imports the fixture registers its own, and two playwright instances cannot
    run at once in one thread."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_browser(PLAYWRIGHT_HINT)
    executable = find_chromium()
    if executable is None:
        missing_browser(INSTALL_HINT)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=list(CHROMIUM_FLAGS)
        )
        try:
            yield browser
        finally:
            browser.close()


def open_report(
    chromium: Browser, path: Path | str, timeout_s: float = DRAW_TIMEOUT_S
) -> ReportPage:
    """Open the report file in a fresh browser context and wait until every `.ls-chart`
    has been drawn, at most `timeout_s` after the load event. Any request that would
    leave the file (http, https, ws, another file) is recorded in `outside_requests` and
    aborted, so a report that reaches for a CDN fails fast instead of hanging. Raises
    `ReportNotDrawn` when a chart does not draw, with the page's errors and outside
    requests in the message."""
    (report,) = open_reports(chromium, [path], timeout_s)
    return report


def open_reports(
    chromium: Browser, paths: Sequence[Path | str], timeout_s: float = DRAW_TIMEOUT_S
) -> list[ReportPage]:
    """`open_report` of each of `paths`, in that order, their pages loading side by side:
    each renderer is a process of its own, so a second core parses one page's plotly
    while the first parses another's. Closes every page it opened when one fails."""
    reports: list[ReportPage] = []
    try:
        for path in paths:
            context = chromium.new_context(viewport={"width": 1280, "height": 800})
            report = ReportPage(context.new_page(), Path(path).resolve().as_uri())
            reports.append(report)
            report._listen(context)
            report._start()
        for report in reports:
            report._load(timeout_s)
    except BaseException:
        for report in reports:
            report.close()
        raise
    return reports


def uniform(png: bytes) -> bool:
    """Whether every pixel of the image is the same colour (nothing drawn on it)."""
    from PIL import Image

    extrema = Image.open(io.BytesIO(png)).getextrema()
    bands = extrema if isinstance(extrema[0], tuple) else (extrema,)
    return all(low == high for low, high in bands)


# Plain JSON out of a plotly value: numpy arrays arrive as {dtype, bdata[, shape]} specs
# that plotly decodes into `_inputArray` (typed arrays, or arrays of them when 2-D).
_TO_PLAIN_JS = """
const toPlain = (v) => {
  if (ArrayBuffer.isView(v)) return Array.from(v);
  if (Array.isArray(v)) return v.map(toPlain);
  if (v && typeof v === 'object' && 'bdata' in v && v._inputArray) return toPlain(v._inputArray);
  return v === undefined ? null : v;
};
"""

_TRACES_JS = (
    "(id) => {"
    + _TO_PLAIN_JS
    + """
  return document.getElementById(id).data.map((t) => ({
    name: t.name ?? null, type: t.type ?? 'scatter', x: toPlain(t.x), y: toPlain(t.y),
    customdata: toPlain(t.customdata), text: toPlain(t.text),
  }));
}"""
)

# The drawn marker of point `i` of trace `trace`, and the axes that placed it. Markers
# are matched by their datum's index `i`, since plotly skips points it cannot place
# (non-positive on a log axis, missing values), so the nth element is not the nth point.
_POINT_JS = """
([id, trace, i]) => {
  const gd = document.getElementById(id);
  const layer = [...gd.querySelectorAll('.scatterlayer .trace')]
    .find((g) => g.__data__ && g.__data__[0] && g.__data__[0].trace.index === trace);
  if (!layer) return {error: `trace ${trace} of #${id} has no drawn scatter layer`};
  const el = [...layer.querySelectorAll('.points path.point')]
    .find((p) => p.__data__ && p.__data__.i === i);
  if (!el) return {error: `point ${i} of trace ${trace} of #${id} is not drawn`};
  const t = gd._fullData[trace];
  const axis = (ref) => gd._fullLayout[ref[0] + 'axis' + ref.slice(1)];
  return {el, x: axis(t.xaxis || 'x'), y: axis(t.yaxis || 'y')};
}
"""

_DATA_COORDS_JS = (
    "(args) => { const found = ("
    + _POINT_JS
    + r""")(args);
  if (found.error) return found;
  const tf = found.el.getAttribute('transform') || 'translate(0,0)';
  const m = /translate\(([^,\s]+)[\s,]+([^)\s]+)\)/.exec(tf);
  if (!m) return {error: `cannot read a marker position from transform "${tf}"`};
  const value = (ax, p) => (ax.type === 'log' ? Math.pow(10, ax.p2l(p)) : ax.p2l(p));
  return {x: value(found.x, Number(m[1])), y: value(found.y, Number(m[2]))};
}"""
)

_MARK_POINT_JS = (
    "(args) => { const found = ("
    + _POINT_JS
    + """)(args);
  if (found.error) return found.error;
  document.querySelectorAll('[data-ls-probe]').forEach((e) => e.removeAttribute('data-ls-probe'));
  found.el.setAttribute('data-ls-probe', '');
  return null;
}"""
)

# Per stack (subplot and stackgroup), the last visible trace's calcdata `y`: plotly sets
# each point's `y` to the stacked top (its own value is `s`), and fills the x positions
# other traces have (`gap` points), so the last trace's tops are the totals at every x.
_MAX_STACKED_JS = """
(id) => {
  const tops = new Map();
  for (const cd of document.getElementById(id).calcdata) {
    const t = cd[0] && cd[0].trace;
    if (!t || t.visible !== true || !t.stackgroup) continue;
    tops.set([t.xaxis, t.yaxis, t.stackgroup].join('/'), cd.map((d) => d.y));
  }
  const ys = [...tops.values()].flat().filter(Number.isFinite);
  return ys.length ? Math.max(...ys) : null;
}
"""

_HOVER_TEXT_JS = """
() => [...document.querySelectorAll('.hoverlayer .hovertext text')]
  .map((t) => (t.querySelector('tspan.line')
    ? [...t.querySelectorAll('tspan.line')].map((s) => s.textContent).join('\\n')
    : t.textContent))
  .filter((s) => s).join('\\n')
"""

_ALL_DRAWN_JS = """
() => [...document.querySelectorAll('.ls-chart')].every(
  (gd) => window.Plotly && gd._fullLayout && gd.calcdata && gd.querySelector('.main-svg'))
"""


class ReportPage:
    """A report open in the browser, with what it asked of the outside world."""

    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.url = url
        self.console_errors: list[str] = []  # console.error() texts and uncaught errors
        self.outside_requests: list[str] = []  # URLs other than the report, all aborted
        self.load_s: float | None = None  # navigation start to every chart drawn
        self._started = 0.0

    def __enter__(self) -> ReportPage:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.page.context.close()

    def _listen(self, context: BrowserContext) -> None:
        context.route("**/*", self._on_request)
        context.route_web_socket(lambda _url: True, self._on_websocket)
        self.page.on("console", self._on_console)
        self.page.on("pageerror", self._on_page_error)

    def _on_request(self, route: Route) -> None:
        url = route.request.url
        if url.split("#")[0] == self.url or url.startswith(INLINE_SCHEMES):
            route.continue_()
        else:
            self.outside_requests.append(url)
            route.abort()

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    def _on_page_error(self, error: Error) -> None:
        self.console_errors.append(f"{error.name}: {error.message}")

    def _on_websocket(self, socket: WebSocketRoute) -> None:
        self.outside_requests.append(socket.url)
        socket.close()

    def _start(self) -> None:
        self._started = time.perf_counter()
        self.page.goto(self.url, wait_until="commit", timeout=LOAD_TIMEOUT_S * 1000)

    def _load(self, timeout_s: float) -> None:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        self.page.wait_for_load_state("load", timeout=LOAD_TIMEOUT_S * 1000)
        # Every script has run by the load event: without Plotly no chart will ever draw,
        # unless the page unpacks its own (lightspeed's reports do, then say when drawn).
        charts = self.chart_ids()
        packed = self.page.evaluate("() => Boolean(document.getElementById('ls-plotly'))")
        if charts and not packed and not self.page.evaluate("() => Boolean(window.Plotly)"):
            raise ReportNotDrawn(self._why("window.Plotly is not defined"))
        try:
            self.page.wait_for_function(
                "() => document.body.dataset.drawn === 'failed' || (" + _ALL_DRAWN_JS + ")()",
                timeout=timeout_s * 1000,
            )
        except PlaywrightTimeout as error:
            raise ReportNotDrawn(self._why(f"charts not drawn in {timeout_s} s")) from error
        if self.page.evaluate("() => document.body.dataset.drawn") == "failed":
            raise ReportNotDrawn(self._why("the page could not draw its charts"))
        # Let plotly finish anything it deferred to the next frames.
        self.page.evaluate(
            "() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok)))"
        )
        self.load_s = time.perf_counter() - self._started

    def _why(self, what: str) -> str:
        return (
            f"{self.url}: {what}; console errors: {self.console_errors}; "
            f"outside requests: {self.outside_requests}"
        )

    def chart_ids(self, kind: str | None = None) -> list[str]:
        """Ids of the `.ls-chart` divs in page order, or of those with `data-chart=kind`."""
        ids: list[str] = self.page.evaluate(
            "(kind) => [...document.querySelectorAll('.ls-chart')]"
            ".filter((d) => kind === null || d.dataset.chart === kind).map((d) => d.id)",
            kind,
        )
        return ids

    def traces(self, chart_id: str) -> list[dict[str, Any]]:
        """name, type, x, y, customdata and text of each trace as the page holds them
        (`gd.data`), arrays as lists; absent fields are None."""
        traces: list[dict[str, Any]] = self.page.evaluate(_TRACES_JS, chart_id)
        return traces

    def point_data_coords(
        self, chart_id: str, trace_index: int, point_index: int
    ) -> tuple[float, float]:
        """Where point `point_index` of trace `trace_index` (indices into `gd.data`) is
        plotted, in data units: its marker's SVG translate, mapped back through the
        axes' own `p2l` (10**p2l on a log axis). On a date axis this is milliseconds
        since the epoch, on a category axis the category's position."""
        found = self.page.evaluate(_DATA_COORDS_JS, [chart_id, trace_index, point_index])
        if "error" in found:
            raise LookupError(found["error"])
        return found["x"], found["y"]

    def point_page_position(
        self, chart_id: str, trace_index: int, point_index: int
    ) -> tuple[float, float]:
        """Centre of the point's marker in viewport pixels (scrolled into view first),
        where `page.mouse` or `hover_text` should go to hover it."""
        error = self.page.evaluate(_MARK_POINT_JS, [chart_id, trace_index, point_index])
        if error:
            raise LookupError(error)
        marker = self.page.locator("[data-ls-probe]")
        marker.scroll_into_view_if_needed()
        box = marker.bounding_box()
        if box is None:
            raise LookupError(
                f"point {point_index} of trace {trace_index} of #{chart_id} is not visible"
            )
        return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

    def hover_text(self, x: float, y: float, timeout_s: float = HOVER_TIMEOUT_S) -> str:
        """Text of plotly's hover label after moving the mouse to (x, y), one line per
        label line; raises playwright's TimeoutError when no label appears."""
        # The viewport's corner is in no plot area: the previous label goes away.
        self.page.mouse.move(0, 0)
        self.page.wait_for_function(f"() => !({_HOVER_TEXT_JS})()", timeout=timeout_s * 1000)
        self.page.mouse.move(x, y)
        self.page.wait_for_function(f"() => ({_HOVER_TEXT_JS})() !== ''", timeout=timeout_s * 1000)
        text: str = self.page.evaluate(_HOVER_TEXT_JS)
        return text

    def plot_area_png(self, chart_id: str, grid: bool = False) -> bytes:
        """Screenshot of the main axes' plot area (the `.nsewdrag` rectangle) inset by
        one pixel, clear of axis lines. Grid and zero lines are hidden unless `grid`,
        so a uniform image means no data was drawn."""
        self.page.mouse.move(0, 0)
        area = self.page.locator(f"#{chart_id} .draglayer .xy .nsewdrag")
        area.scroll_into_view_if_needed()
        box = area.bounding_box()
        if box is None:
            raise LookupError(f"#{chart_id} has no main plot area")
        style = None
        if not grid:
            style = self.page.add_style_tag(
                content=".gridlayer, .zerolinelayer, .minor-gridlayer { visibility: hidden; }"
            )
        try:
            clip: FloatRect = {
                "x": box["x"] + 1,
                "y": box["y"] + 1,
                "width": box["width"] - 2,
                "height": box["height"] - 2,
            }
            return self.page.screenshot(clip=clip)
        finally:
            if style is not None:
                style.evaluate("(s) => s.remove()")

    def plotted_max_stacked_y(self, chart_id: str) -> float:
        """Largest stacked total of the chart's stacked traces (`stackgroup`), from
        `gd.calcdata`: what plotly computed to draw the top of the stack."""
        top: float | None = self.page.evaluate(_MAX_STACKED_JS, chart_id)
        if top is None:
            raise LookupError(f"#{chart_id} has no visible stacked trace")
        return top
