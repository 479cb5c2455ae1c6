"""The frame every HTML report is drawn in: one self-contained file.

Plotly's JavaScript (from the installed `plotly` package) is embedded once, gzipped and
base64-encoded (about 1.9 MB instead of 4.8 MB): the page unpacks it with the
browser's own `DecompressionStream`, then draws the charts from the figures it lists in
a JSON script element. The page's Content-Security-Policy allows no fetch from anywhere,
so a report never reaches the network, whatever a result holds.
"""

from __future__ import annotations

import base64
import datetime
import functools
import gzip
from importlib import resources

from lightspeed.errors import ConfigError
from lightspeed.report.html.markup import Markup, Page, script_json, text
from lightspeed.report.render_json import Clock, utc_now

# No source but the page itself: inline scripts and styles, data: and blob: images.
_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline';"
    " img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)


@functools.lru_cache(maxsize=1)
def packed_plotly() -> str:
    """Plotly's JavaScript bundle, gzipped (no timestamp, so the same bytes every time)
    and base64-encoded."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ConfigError(
            "an HTML report needs plotly, which lightspeed depends on: pip install plotly."
        ) from None
    packed = gzip.compress(get_plotlyjs().encode("utf-8"), compresslevel=9, mtime=0)
    return base64.b64encode(packed).decode("ascii")


def _asset(name: str) -> str:
    return (resources.files("lightspeed.report.html") / "assets" / name).read_text("utf-8")


def render_page(
    page: Page,
    *,
    subtitle: Markup,
    warnings: tuple[str, ...] = (),
    version: str = "unknown",
    clock: Clock = utc_now,
) -> str:
    """The whole HTML file of `page`: header, navigation, warnings, sections, and the
    script that draws its charts. Only the footer's date depends on `clock`."""
    rendered = clock().astimezone(datetime.timezone.utc).isoformat(timespec="seconds")
    nav = "".join(f'<a href="#{anchor}">{text(title)}</a>' for anchor, title in page.nav)
    warned = ""
    if warnings:
        items = "".join(f"<li>{text(w)}</li>" for w in warnings)
        warned = (
            f'<section id="warnings"><h2>Warnings</h2><ul class="warnings">{items}</ul></section>'
        )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(page.title)}</title><style>{_asset('report.css')}</style></head>\n"
        f"<body><header><h1>{text(page.title)}</h1>{subtitle}<nav>{nav}</nav></header>\n"
        '<p id="ls-chart-error" class="error" hidden></p>\n'
        f"{warned}{''.join(page.sections)}\n"
        f"<footer>lightspeed {text(version)}; this page rendered {text(rendered)}."
        " One file, no network: every script, style and datum is inline.</footer>\n"
        f'<script type="application/json" id="ls-figures">{script_json(page.figures)}</script>\n'
        f'<script type="application/gzip+base64" id="ls-plotly">{packed_plotly()}</script>\n'
        f"<script>{_asset('report.js')}</script>\n"
        "</body></html>\n"
    )
