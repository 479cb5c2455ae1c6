"""One document model, drawn by each renderer: byte-exact terminal text at a given
width, JSON with an injected clock, and a trace analysis registered in one place
reaching both."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from json_trees import json_trees

from lightspeed import trace
from lightspeed.document import (
    Column,
    Document,
    Fields,
    Findings,
    Notes,
    Section,
    Style,
    Table,
    Tree,
    Unit,
    Value,
    line,
)
from lightspeed.report import render_json, render_terminal
from lightspeed.report.trace_report import trace_document
from lightspeed.rules import Finding, FindingKind
from lightspeed.trace import analysis as trace_analysis
from lightspeed.trace.window import WindowAnalyzer

TRACE = Path(__file__).parent.parent / "data" / "traces" / "hta-a100-cuda-event-sync.json.gz"


def _clock() -> datetime.datetime:
    return datetime.datetime(2026, 11, 23, 18, 0, 5, tzinfo=datetime.timezone.utc)


DOC = Document(
    kind="example",
    data={"step_s": 0.0123, "bound": "memory"},
    sections=(
        Section(
            "Summary",
            (
                Fields(
                    (
                        ("step time", line(Value(0.0123, Unit.SECONDS), " median")),
                        ("moved", line(Value(3 * 2**20, Unit.BYTES))),
                        ("bound", line(Value("memory", style=Style.BOLD))),
                    )
                ),
            ),
        ),
        Table(
            title="Ops",
            columns=(
                Column("op", "op", shrink=True),
                Column("time_s", "time", numeric=True),
                Column("efficiency", "of SoL", numeric=True),
            ),
            rows=(
                ("mm", Value(2.5e-5, Unit.SECONDS), Value(0.75, Unit.FRACTION)),
                ("relu", Value(None, Unit.SECONDS), Value(float("nan"), Unit.FRACTION)),
            ),
        ),
        Tree(line("model"), (Tree(line("fc1  ", Value(1.5e9, Unit.FLOPS))),)),
        Notes(("warning: noisy",), style=Style.WARNING),
        Findings(
            (
                Finding(
                    kind=FindingKind.DATA_LOADING,
                    message="the step waits",
                    evidence={"max_speedup": 1.5},
                ),
            )
        ),
    ),
)

# Line by line, so that the trailing spaces rich pads tables with are visible.
EXPECTED = "\n".join(
    [
        "╭─ Summary ──────────────────────────────────────╮",
        "│ step time  12.3 ms median                      │",
        "│ moved      3 MiB                               │",
        "│ bound      memory                              │",
        "╰────────────────────────────────────────────────╯",
        "Ops                    ",
        "                       ",
        " op      time   of SoL ",
        " ───────────────────── ",
        " mm     25 µs    75.0% ",
        " relu       —        — ",
        "                       ",
        "model",
        "└── fc1  1.5 GFLOP",
        "warning: noisy",
        "Findings",
        "• [data-loading] the step waits (fixing it: at ",
        "most 1.50× faster)",
        "",
    ]
)


def test_terminal_render_is_byte_exact() -> None:
    assert render_terminal.render_text(DOC, width=50) == EXPECTED


def test_json_render_is_byte_exact_with_an_injected_clock() -> None:
    obj = render_json.render(DOC, clock=_clock)
    assert obj["created_at"] == "2026-11-23T18:00:05+00:00"
    assert obj["schema_version"] == render_json.SCHEMA_VERSION
    assert render_json.dumps(obj) == render_json.dumps(render_json.render(DOC, clock=_clock))
    assert json.loads(render_json.dumps(obj))["step_s"] == 0.0123


def test_a_table_row_must_fill_its_columns() -> None:
    with pytest.raises(ValueError, match="a row of 1 cells"):
        Table(title="t", columns=(Column("a", "a"), Column("b", "b")), rows=(("x",),))


def test_one_registration_adds_an_analysis_to_json_and_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window analysis is a WindowAnalyzer and one entry in WINDOW_ANALYZERS: its
    result reaches the JSON under its key and the report through its description."""
    counter = WindowAnalyzer(
        key="device_event_count",
        analyse=lambda w: len(w.rows),
        data=lambda n: n,
        describe=lambda n: [("device events", line(Value(n, Unit.INTEGER)))],
    )
    monkeypatch.setattr(
        trace_analysis, "WINDOW_ANALYZERS", (*trace_analysis.WINDOW_ANALYZERS, counter)
    )
    doc = trace_document(trace.analyse([TRACE]))
    rank = doc.data["ranks"][0]
    # Five device events in the step (fill, reduce, gt, memcpy, spin); the whole trace,
    # counted as HTA counts it, adds the device's one Stream Sync record.
    assert rank["steps"][0]["device_event_count"] == 5
    assert rank["device_event_count"] == 6
    assert re.search(r"│ device events +6 ", render_terminal.render_text(doc, width=120))


@given(json_trees, st.lists(st.lists(json_trees, max_size=3), min_size=1, max_size=3))
def test_a_document_written_in_pieces_is_the_document_with_its_lists(
    tree: Any, lists: list[list[Any]]
) -> None:
    # Lists made item by item, wherever they sit: a dict's value, a list's element.
    def document(first: Any, rest: list[Any]) -> dict[str, Any]:
        return {"tree": tree, "first": first, "nested": [{"more": s} for s in rest]}

    streamed = [render_json.Streamed(len(items), items.__getitem__) for items in lists]
    written = b"".join(render_json.pieces(document(streamed[0], streamed[1:])))
    assert json.loads(written) == json.loads(json.dumps(document(lists[0], lists[1:])))
    # Each item of a streamed list is one line of its own.
    lines = written.decode().split("\n")  # JSON escapes a line feed, not U+0085 or U+2028
    for items in lists:
        for item in items:
            assert any(
                ln.strip().rstrip(",")
                == json.dumps(item, separators=(",", ":"), ensure_ascii=False)
                for ln in lines
            )
