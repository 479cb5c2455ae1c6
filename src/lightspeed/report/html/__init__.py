"""The interactive HTML report: one self-contained file per result (a profile, a trace
analysis, a bench run, a tuning run, a sweep, a latency profile, a serving plan, a load
test), drawn from its JSON alone, so a saved result renders the same as a fresh one.

`render_html(doc)` draws a result's JSON object; `write_html` writes it atomically;
`read_result(path)` loads a saved result, refusing with one line a missing, corrupt,
unknown or newer one.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lightspeed.errors import ConfigError
from lightspeed.report.html.frame import render_page
from lightspeed.report.html.markup import Markup, text
from lightspeed.report.render_json import SCHEMA_VERSION, Clock, utc_now, write_text


def render_html(doc: Mapping[str, Any], *, clock: Clock = utc_now) -> str:
    """The HTML report of the result `doc` (a JSON object lightspeed wrote)."""
    check_result(doc, "the result")
    try:
        return _render(doc, clock)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ConfigError(
            f"the {doc['document']} result is damaged ({type(exc).__name__}: {exc});"
            " write it again with --json."
        ) from exc


# Each kind's page, `report.html.<name>.<name>(doc)` (imported when drawn), and what its
# subtitle says of the result.
_PAGES: dict[str, tuple[str, Callable[[Mapping[str, Any]], str]]] = {
    "profile": ("profile_page", lambda d: f"profile of {d['workload']['name']}"),
    "trace-analysis": ("trace_page", lambda d: f"trace analysis of {len(d['ranks'])} rank(s)"),
    "bench": ("bench_page", lambda d: f"bench of {len(d['results'])} workloads"),
    "tune": ("tune_page", lambda d: f"tuning of {d['workload']['name']}"),
    "sweep": ("sweep_page", lambda d: f"sweep of {d['workload']['name']}"),
    "latency-profile": ("latency_page", lambda d: f"latency profile of {d['latency']['name']}"),
    "serving-plan": ("plan_page", lambda d: f"serving plan of {len(d['outcomes'])} session(s)"),
    "load-test": ("loadtest_page", lambda d: f"load test of {len(d['load']['runs'])} run(s)"),
    "trace-prediction": (
        "trace_prediction_page",
        lambda d: f"what-ifs from {len(d['ranks'])} trace(s)",
    ),
}
# The results a report draws, by their `document`.
KINDS = tuple(_PAGES)


def _render(doc: Mapping[str, Any], clock: Clock) -> str:
    name, what = _PAGES[doc["document"]]
    draw = getattr(importlib.import_module(f"lightspeed.report.html.{name}"), name)
    page = draw(doc)
    subtitle = _subtitle(what(doc), doc)
    return render_page(
        page,
        subtitle=subtitle,
        warnings=tuple(str(w) for w in doc.get("warnings") or ()),
        version=str(doc.get("lightspeed_version") or "unknown"),
        clock=clock,
    )


def _subtitle(what: str, doc: Mapping[str, Any]) -> Markup:
    return (
        f'<p class="caption">{text(what)}; result written {text(doc.get("created_at", "?"))}'
        f" by lightspeed {text(doc.get('lightspeed_version', '?'))}"
        f" (schema {text(doc.get('schema_version'))})</p>"
    )


def write_html(path: str | Path, doc: Mapping[str, Any], *, clock: Clock = utc_now) -> Path:
    """Write the HTML report of `doc` to `path` atomically."""
    return write_text(path, render_html(doc, clock=clock))


def check_result(doc: object, where: str) -> None:
    """Refuse, in one line, what is not a result the report can draw."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: not a lightspeed result (a JSON object is expected).")
    kind, version = doc.get("document"), doc.get("schema_version")
    if kind not in KINDS:
        known = ", ".join(KINDS)
        raise ConfigError(
            f"{where}: a result of kind {kind!r} has no HTML report; it draws {known}"
            " (the JSON of lightspeed profile, trace, bench, tune, sweep, serve-profile,"
            " serve-plan or loadgen)."
        )
    if not isinstance(version, int) or isinstance(version, bool):
        raise ConfigError(f"{where}: no schema_version, so not a result lightspeed wrote.")
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"{where}: schema {version!r} is newer than this lightspeed reads"
            f" ({SCHEMA_VERSION}); upgrade lightspeed (pip install -U lightspeed)."
        )


def read_result(path: str | Path) -> dict[str, Any]:
    """The JSON object of a saved result, checked to be one the report can draw; its
    lists written an item a line (a trace's steps) read from the file as they are used
    (`read_json.OnDisk`)."""
    from lightspeed.report import read_json

    where = str(path)
    try:
        # A long trace's steps stay in the file until the page reads them, one at a time.
        doc = read_json.load(path)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file; pass a result written with --json.") from None
    except IsADirectoryError:
        raise ConfigError(
            f"{where}: a directory; pass a result file written with --json."
        ) from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror}).") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        reason = "too deeply nested" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{where}: not readable as JSON ({reason}).") from None
    check_result(doc, where)
    return doc
