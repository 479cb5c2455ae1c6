"""Tables at 80 and 160 columns: every row on one line, names cut in the middle, and
two different rows never drawn alike."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import lightspeed
from factories import FAKE_CPU
from lightspeed import suite, trace
from lightspeed.analysis.bench_compare import compare_runs
from lightspeed.analysis.profile_analysis import analyse
from lightspeed.document import Column, Document, Section, Table
from lightspeed.facts.bench import BenchResult, BenchRun
from lightspeed.hardware import catalog_hardware, catalog_ids
from lightspeed.report.bench_report import bench_document
from lightspeed.report.hardware_report import hardware_document, hardware_list_document
from lightspeed.report.history_report import compare_document
from lightspeed.report.names_fit import elide_middle, fit_names
from lightspeed.report.profile_report import profile_document
from lightspeed.report.render_terminal import render_text
from lightspeed.report.suite_report import suite_document
from lightspeed.report.trace_report import trace_document

DATA = Path(__file__).parents[1] / "data"
TRACES = sorted((DATA / "traces").glob("*.json.gz"))


def tables(block: object) -> Iterator[Table]:
    if isinstance(block, Table):
        yield block
    for child in getattr(block, "sections", ()) or getattr(block, "blocks", ()):
        yield from tables(child)


def documents() -> Iterator[tuple[str, Document]]:
    profile = lightspeed.load_profile(DATA / "profiles" / "mlp-tiny-schema1.json")
    yield "profile", profile_document(analyse(profile), top=30)
    for path in TRACES:
        yield path.name, trace_document(trace.analyse([path]))
    yield "hw list", hardware_list_document([catalog_hardware(i) for i in catalog_ids()])
    yield "hw show", hardware_document(FAKE_CPU)
    yield "suite", suite_document([(n, suite.describe(n)) for n in suite.names()])
    assert profile.timing is not None
    alike = ("transformer-encoder-tiny", "transformer-base-tiny", "mobilenetv3-large-tiny")
    results = tuple(
        BenchResult(
            workload=dataclasses.replace(profile.workload, name=name),
            profile=profile,
            rounds=(profile.timing, profile.timing),
        )
        for name in alike
    )
    run = BenchRun(results=results, hardware=FAKE_CPU, size="tiny", rounds=2, threads=2)
    yield "bench", bench_document(run)
    a, b = (json.loads((DATA / "bench" / f"mlp-ncf-{x}.json").read_text()) for x in "ab")
    yield "compare", compare_document(compare_runs(a, b), "run 1", "run 2")


def drawn_rows(table: Table, width: int) -> list[str]:
    """The lines `table`'s rows are drawn on, alone on a terminal `width` wide."""
    lines = render_text(Document("t", {}, (table,)), width).splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip().startswith("─"))
    body = lines[rule + 1 :]
    end = next((i for i, line in enumerate(body) if not line.strip()), len(body))
    return body[:end]


CASES = [(name, doc) for name, doc in documents()]


@pytest.mark.parametrize("width", [80, 160])
@pytest.mark.parametrize(("name", "doc"), CASES, ids=[name for name, _ in CASES])
def test_each_row_is_one_line_and_no_two_rows_alike(name: str, doc: Document, width: int) -> None:
    for table in tables(doc):
        rows = drawn_rows(table, width)
        assert len(rows) == len(table.rows), f"{table.title}: a row wraps at {width} columns"
        assert all(len(r.rstrip()) <= width for r in rows)
        distinct = {tuple(map(str, row)) for row in table.rows}
        assert len(set(rows)) == len(distinct), f"{table.title}: rows drawn alike at {width}"


def test_a_profiles_top_ops_tell_alike_calls_apart() -> None:
    profile = lightspeed.load_profile(DATA / "profiles" / "mlp-tiny-schema1.json")
    (top,) = [t for t in tables(profile_document(analyse(profile), top=30)) if "Top" in t.title]
    ops = [row[:3] for row in top.rows]
    assert len(set(ops)) == len(ops)
    assert any(str(row[0]).endswith(" #2") for row in top.rows)


def test_names_are_cut_in_the_middle_and_kept_apart() -> None:
    assert elide_middle("encoder.layers.0.attn.out_proj", 12) == "encode…_proj"
    paths = ["encoder.layers.10.self_attn.out_proj", "encoder.layers.11.self_attn.out_proj"]
    cut = fit_names(paths, 20)
    assert cut[0] != cut[1] and all(len(c) <= 20 for c in cut)
    assert "10" in cut[0] and "11" in cut[1]
    # An abbreviation that would make two kernels alike is given up for them.
    kernels = ["void k<float>(float*)", "void k<half>(half*)", "void other<int>(int)"]
    shown = fit_names(kernels, None, lambda n: n.split("<")[0].removeprefix("void "))
    assert shown == [kernels[0], kernels[1], "other"]


def test_wide_draws_names_whole() -> None:
    long = "encoder.layers.11.self_attention.output_projection.weight_update"
    table = Table(
        title="t",
        columns=(Column("name", "name", shrink=True),),
        rows=((long,),),
    )
    doc = Document("t", {}, (Section(None, (table,), framed=False),))
    assert long not in render_text(doc, 40)
    assert long in "".join(render_text(doc, 40, wide=True).split())
