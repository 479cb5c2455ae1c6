"""`save_html`: the HTML report of a profile or a trace analysis from Python, as
`--html` writes it on the command line."""

from __future__ import annotations

from pathlib import Path

from lightspeed.facts.profile import Profile
from lightspeed.report import render_json
from lightspeed.report.html import write_html
from lightspeed.trace.analysis import TraceAnalysis


def save_html(result: Profile | TraceAnalysis, path: str | Path) -> Path:
    """Write the interactive HTML report of `result` (a `Profile`, or what
    `analyse_traces` returns) to `path`: one self-contained file, no network needed."""
    if isinstance(result, Profile):
        from lightspeed.analysis.profile_analysis import analyse
        from lightspeed.report.profile_report import profile_document

        doc = profile_document(analyse(result))
    else:
        from lightspeed.report.trace_report import trace_document

        doc = trace_document(result)
    # The page draws exactly what a saved result would hold.
    return write_html(path, render_json.as_read_back(render_json.render(doc)))
