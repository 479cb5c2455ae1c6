"""The glossary defines what the reports print, and `docs/glossary.md` is the glossary.

What the reports print is read from rendered documents of every kind, built from
fixtures (a saved profile, real traces, the catalog, a calibrated fake CPU), never from a
list kept by hand: every Fields label, Table column header and title, Section title, and
Fields, Findings and Notes title, walking sections recursively; "Warnings" where a
document has warnings (the terminal draws them under it); and the cells of the columns
that hold vocabulary rather than names (phase, category, precision, type, bound).

A label finds its entry through `glossary.lookup` as printed. The rule is
`glossary.key`: case, punctuation, "%" and numbers do not count, nor details in
parentheses ("Modules (depth 2)" is "modules") or whatever follows a colon or semicolon
("Top 10 ops by headroom: where to look first" is "top ops by headroom", "Rank 0: path"
is "rank"); then a plural finds its singular ("Modules" → "module"). Left out: empty
labels and titles (a row that continues the one above, the untitled peaks table), and
a hardware document's section title, which is the device's name, not a term.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from factories import FAKE_CPU
from lightspeed import glossary, suite, trace
from lightspeed.analysis.bench_compare import compare_runs
from lightspeed.analysis.profile_analysis import analyse
from lightspeed.analysis.roofline import Ceilings, place, place_on
from lightspeed.cli import explain_cmd
from lightspeed.document import Block, Document, Fields, Findings, Notes, Section, Table, Value
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.bench import BenchResult, BenchRun
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.timing import Measurement, StepTiming, WorkloadInfo
from lightspeed.hardware import catalog_hardware, catalog_ids
from lightspeed.predict.whatif import predict
from lightspeed.report.bench_report import bench_document
from lightspeed.report.files_report import files_document
from lightspeed.report.hardware_report import (
    hardware_document,
    hardware_list_document,
    roofline_document,
)
from lightspeed.report.history_report import (
    compare_document,
    runs_document,
    workload_history_document,
)
from lightspeed.report.profile_json import load_profile
from lightspeed.report.profile_report import profile_document
from lightspeed.report.suite_report import suite_document
from lightspeed.report.timing_report import timing_document
from lightspeed.report.trace_report import trace_document
from lightspeed.rules import Bound, FindingKind
from lightspeed.trace.names import KernelType

DATA = Path(__file__).parent.parent / "data"
TRACES = DATA / "traces"
GLOSSARY_MD = Path(__file__).parent.parent.parent / "docs" / "glossary.md"
# Traces between them print every line a trace report can: steps and none, a GPU and
# none, matrix products on a catalog GPU and off it, and two ranks compared.
TRACE_SETS = (
    ("hta-a100-cuda-event-sync.json.gz",),
    ("hta-a100-alexnet-benchmark.json.gz",),
    ("hta-cpu-only-rank34.json.gz",),
    ("hta-mi250-minitoy-train.json.gz",),
    ("tracelens-h100-bert-small-inference.json.gz",),
    ("hta-recsys-128ranks-sampled-rank0.json.gz", "hta-recsys-128ranks-sampled-rank1.json.gz"),
)
# Columns whose cells are vocabulary (a phase, a bound), not names (an op, a kernel).
VOCABULARY_COLUMNS = {"phase", "category", "precision", "type", "bound"}

# FAKE_CPU with every figure a calibration can show: kernels per precision, memory and
# cache rates, the canary.
_CALIBRATION = FAKE_CPU.calibration
assert _CALIBRATION is not None
CALIBRATED = dataclasses.replace(
    FAKE_CPU,
    cache_bytes=32 * 2**20,
    cache_bandwidth_bytes_per_s=200e9,
    calibration=dataclasses.replace(
        _CALIBRATION,
        best_compute_kernel={Precision.FP32: "mm-nt", Precision.BF16: "sdpa"},
        compute_kernel_flops_per_s={
            Precision.FP32: {"mm-nt": 100e9, "conv3x3": 80e9},
            Precision.BF16: {"mm-nt": 150e9, "sdpa": 200e9},
        },
        memory_kernel_bytes_per_s={"addcdiv": 20e9, "copy": 15e9},
        cache_kernel_bytes_per_s={"scale": 200e9},
        canary_kernel="fp32 256×256×256 matmul",
        canary_flops_per_s=90e9,
        load_average=0.5,
        duration_s=42.0,
    ),
)


def _profile_documents() -> Iterator[tuple[str, Document]]:
    profile = load_profile(DATA / "profiles" / "mlp-tiny-schema1.json")
    yield "profile", profile_document(analyse(profile))
    # Cut short, with an op no FLOP formula covers: the rows only such a profile prints.
    timed = next(i for i, op in enumerate(profile.ops) if op.time_s)
    ops = list(profile.ops)
    ops[timed] = dataclasses.replace(ops[timed], flops_known=False)
    stopped = dataclasses.replace(profile, ops=tuple(ops), failure="out of memory")
    yield "profile, stopped", profile_document(analyse(stopped))
    predicted = predict(profile, hardware=catalog_hardware("h100-sxm"))
    yield "profile, predicted", profile_document(analyse(predicted))
    yield "profile, fused", profile_document(analyse(predict(profile, fuse=4)))


def _timing_documents() -> Iterator[tuple[str, Document]]:
    timing = StepTiming(
        workload=WorkloadInfo(
            name="mlp-tiny",
            batch_size=32,
            device=Device.CPU,
            precision=Precision.FP32,
            parameter_count=26_122,
            tokens_per_sample=16,
        ),
        measurement=Measurement(
            times_s=(0.010, 0.011, 0.012),  # 3 replicates: a warning
            steps_per_replicate=2,
            warmup_steps=9,
            warmup_s=0.4,
            settled=True,
        ),
    )
    yield "timing, calibrated", timing_document(timing, CALIBRATED)
    yield "timing, catalog", timing_document(timing, catalog_hardware("h100-sxm"))


def _trace_documents() -> Iterator[tuple[str, Document]]:
    for names in TRACE_SETS:
        analysis = trace.analyse([TRACES / n for n in names])
        yield names[0], trace_document(analysis)
        steps = [w.step for w in analysis.ranks[0].steps]
        if steps:
            yield f"{names[0]} --step {steps[0]}", trace_document(analysis, step=steps[0])


def _hardware_documents() -> Iterator[tuple[str, Document]]:
    catalog = [catalog_hardware(i) for i in catalog_ids()]
    for hw in (*catalog, FAKE_CPU, CALIBRATED):
        yield f"hw show {hw.id}", hardware_document(hw)
    yield "hw list", hardware_list_document(catalog)
    point = place_on(catalog_hardware("h100-sxm"), 2 * 512**3, 4 * 512**2 * 2, Precision.BF16)
    yield "roofline --hardware", roofline_document(point, catalog_hardware("h100-sxm"))
    ceilings = Ceilings(peak_flops_per_s=6e12, bandwidth_bytes_per_s=300e9)
    yield "roofline --peak-flops", roofline_document(place(1e6, 2e6, ceilings), None)


def _bench_documents() -> Iterator[tuple[str, Document]]:
    profile = load_profile(DATA / "profiles" / "mlp-tiny-schema1.json")
    assert profile.timing is not None
    ran = BenchResult(
        workload=profile.workload, profile=profile, rounds=(profile.timing, profile.timing)
    )
    other = dataclasses.replace(profile.workload, name="other")
    failed = BenchResult(workload=other, profile=None, failure="out of memory")
    run = BenchRun(results=(ran, failed), hardware=CALIBRATED, size="tiny", rounds=2, threads=2)
    yield "bench", bench_document(run)


def _history_documents() -> Iterator[tuple[str, Document]]:
    a, b = (json.loads((DATA / "bench" / f"mlp-ncf-{x}.json").read_text()) for x in "ab")
    row = {
        "id": 1,
        "created_at": a["created_at"],
        "lightspeed_version": "0.1.0",
        "torch_version": "2.13.0",
        "machine": "test CPU",
        "hardware_id": "local",
        "threads": 2,
        "git_commit": "0123456789abcdef+",
        "size": "tiny",
        "rounds": 2,
        "workloads": 2,
    }
    yield "history", runs_document([row], "h.sqlite")
    result = {**row, "run_id": 1, "workload": "mlp-tiny", "step_s": 0.001, "round_spread": 0.1}
    result |= {
        "samples_per_s": 1e3,
        "efficiency": 0.1,
        "mfu": 0.1,
        "peak_bytes": 10,
        "failure": None,
    }
    yield (
        "history NAME",
        workload_history_document("mlp-tiny", [result, {**result, "failure": "x"}], "h"),
    )
    yield "compare", compare_document(compare_runs(a, b), "run 1", "run 2")
    yield "report", files_document(Path("r.json"), "profile", Path("r.html"), Path("r.png"))


def _sweep_documents() -> Iterator[tuple[str, Document]]:
    from lightspeed.facts.sweep import Dimension, SerialCheck, Sweep, Trial
    from lightspeed.report.sweep_report import sweep_document

    space = (
        Dimension(name="lr", kind="loguniform", low=1e-4, high=1e-2, text="lr=…"),
        Dimension(name="weight_decay", kind="choice", choices=(0.0, 0.1), text="weight_decay=…"),
    )
    trials = (
        Trial(number=0, group=0, params={"lr": 1e-3, "weight_decay": 0.0}, loss=0.5),
        Trial(number=1, group=0, params={"lr": 1e-2, "weight_decay": 0.1}, loss=None),
    )
    found = Sweep(
        workload=WorkloadInfo(
            name="mlp-tiny", batch_size=32, device=Device.CPU, precision=Precision.FP32,
            parameter_count=None,
        ),
        space=space, k=2, steps=10, trials=trials, best=0, wall_s=0.1, driver_s=0.01,
        serial=SerialCheck(trials=(0,), seconds=(0.08,), losses=(0.5,)),
        sampler="optuna TPESampler", seed=0,
    )  # fmt: skip
    yield "sweep", sweep_document(found)


@pytest.fixture(scope="module")
def documents() -> list[tuple[str, Document]]:
    """(what it is, the document) of every kind a report is built as."""
    suite_doc = suite_document([(name, suite.describe(name)) for name in suite.names()])
    return [
        *_profile_documents(),
        *_timing_documents(),
        *_trace_documents(),
        *_hardware_documents(),
        *_bench_documents(),
        *_history_documents(),
        *_sweep_documents(),
        ("suite", suite_doc),
    ]


def _cell_text(cell: object) -> str:
    return str(cell.raw) if isinstance(cell, Value) else str(cell)


def printed_terms(doc: Document, skip_titles: set[str]) -> set[str]:
    """Every label, header and title `doc` prints, and its vocabulary columns' cells."""
    found: set[str] = {"Warnings"} if doc.warnings else set()

    def walk(block: Block | Section) -> None:
        if isinstance(block, Section):
            if block.title not in skip_titles:
                found.add(block.title or "")
            for child in block.blocks:
                walk(child)
        elif isinstance(block, Fields):
            found.update([block.title or "", *(label for label, _ in block.rows)])
        elif isinstance(block, Table):
            found.update([block.title, *(c.header for c in block.columns)])
            for i, column in enumerate(block.columns):
                if column.key in VOCABULARY_COLUMNS:
                    found.update(_cell_text(row[i]) for row in block.rows)
        elif isinstance(block, (Findings, Notes)):
            found.add(block.title or "")

    for section in doc.sections:
        walk(section)
    return found - {"", "—"}


def _device_titles() -> set[str]:
    """Hardware documents' section titles: the device's name, id and kind."""
    devices: list[Hardware] = [catalog_hardware(i) for i in catalog_ids()]
    devices += [FAKE_CPU, CALIBRATED]
    return {f"{hw.name} ({hw.id}, {hw.kind.value})" for hw in devices}


def test_every_printed_label_has_an_entry(documents: list[tuple[str, Document]]) -> None:
    skip = _device_titles()
    missing = sorted(
        f"{label!r} (in {what})"
        for what, doc in documents
        for label in printed_terms(doc, skip)
        if glossary.lookup(label) is None
    )
    assert missing == []


def test_the_fixtures_print_what_only_some_reports_print(
    documents: list[tuple[str, Document]],
) -> None:
    """The fixtures reach the rows a report prints only in some cases, so the test above
    sees them."""
    printed = set().union(*(printed_terms(doc, set()) for _, doc in documents))
    conditional = {
        "unknown FLOPs",
        "stopped",
        "Warnings",
        "Calibration",
        "canary",
        "cache bandwidth",
        "Compute kernels (best over sizes)",
        "Sources",
        "GPU–GPU link",
        "matmuls",
        "communication",
        "Across ranks",
        "Collectives matched across ranks",
        "Not analysed",
    }
    assert conditional - printed == set()


@pytest.mark.parametrize(
    "word",
    [
        *(b.value for b in Bound),
        *(k.value for k in FindingKind),
        *(t.value for t in KernelType),
        *(p.value for p in Precision),
    ],
)
def test_every_bound_finding_kind_type_and_precision_has_an_entry(word: str) -> None:
    assert glossary.lookup(word) is not None


def test_docs_glossary_is_the_glossary() -> None:
    assert GLOSSARY_MD.read_text("utf-8") == glossary.markdown(), (
        "docs/glossary.md is out of date: write glossary.markdown() to it"
    )


def test_lookup_ignores_case_and_finds_aliases_plurals_and_titles() -> None:
    mfu = glossary.lookup("MFU")
    assert mfu is not None
    assert glossary.lookup("mfu") is mfu
    assert glossary.lookup("MFU / HFU") is mfu
    assert glossary.lookup("Mfu") is mfu
    sol = glossary.lookup("speed of light")
    assert sol is not None
    assert glossary.lookup("SoL") is sol
    assert glossary.lookup("speed-of-light") is sol
    assert glossary.lookup("optimizer_state") is glossary.lookup("optimizer state")
    replicates = glossary.lookup("replicates")
    assert replicates is not None
    assert glossary.lookup("Replicate") is replicates
    assert glossary.lookup("sync call") is glossary.lookup("sync calls")
    assert glossary.lookup("Modules (depth 2)") is glossary.lookup("module")
    top = glossary.lookup("Top 10 ops by headroom: where to look first")
    assert top is not None
    assert top.term == "top ops by headroom"
    assert glossary.lookup("% of SoL") is glossary.lookup("of speed of light")
    assert glossary.lookup("(optimizer)") is glossary.lookup("optimizer")
    assert glossary.lookup("no such thing") is None


def test_close_matches_spell_alike_and_contain() -> None:
    assert glossary.close_matches("headrom") == ["headroom"]
    assert glossary.close_matches("xyzzy") == []
    # One name per entry: tensor-core-shapes and tensor-core eligible are one entry.
    assert glossary.close_matches("tensor") == ["tensor-core-shapes"]


def test_two_entries_cannot_share_a_key() -> None:
    a = glossary.Entry(term="peak", definition="One.")
    b = glossary.Entry(term="Peak", definition="Two.")
    with pytest.raises(ValueError, match="names both"):
        glossary._build_index((a, b))


def test_every_definition_is_plain_sentences() -> None:
    for entry in glossary.ENTRIES:
        assert entry.definition.endswith("."), entry.term
        assert "  " not in entry.definition, entry.term


def test_explain_an_unknown_term_names_the_closest() -> None:
    with pytest.raises(ConfigError) as raised:
        explain_cmd.explain_command(["headrom"], None)
    assert str(raised.value) == (
        "no glossary entry for 'headrom'; did you mean 'headroom'?"
        " `lightspeed explain` lists every term."
    )
    with pytest.raises(ConfigError, match=r"^no glossary entry for 'xyzzy': `lightspeed explain`"):
        explain_cmd.explain_command(["xyzzy"], None)


def test_explain_prints_a_definition_and_writes_json(capsys: pytest.CaptureFixture[str]) -> None:
    entry = glossary.lookup("IQR")
    assert entry is not None
    explain_cmd.explain_command(["iqr"], None)
    out = "".join(capsys.readouterr().out.split())
    assert "".join(entry.definition.split()) in out.replace("│", "")
    explain_cmd.explain_command(["iqr"], Path("-"))
    doc = json.loads(capsys.readouterr().out)
    assert doc["document"] == "glossary"
    assert doc["entries"] == [
        {"term": "IQR", "aliases": ["interquartile range"], "definition": entry.definition}
    ]


def test_explain_with_no_term_lists_them_all(capsys: pytest.CaptureFixture[str]) -> None:
    explain_cmd.explain_command([], Path("-"))
    doc = json.loads(capsys.readouterr().out)
    terms = [e["term"] for e in doc["entries"]]
    assert terms == sorted(terms, key=str.casefold)
    assert len(terms) == len(glossary.ENTRIES)


def test_explain_takes_several_words_as_one_term() -> None:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """A stand-in for the lightspeed app."""

    app.command("explain")(explain_cmd.explain_command)
    result = CliRunner().invoke(app, ["explain", "live", "at", "peak", "--json", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["entries"][0]["term"] == "live at peak"
