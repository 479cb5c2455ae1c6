"""The HTML report as a file: self-contained, deterministic, escaped, small; saved
results drawn again; bad results refused in one line. (tests/report/test_html_browser.py
opens the pages in Chromium.)"""

from __future__ import annotations

import difflib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from html_results import (
    ONE_WITH_MATMULS,
    TWO_RANKS,
    bench_run,
    fixed_clock,
    tiny_profile,
    trace_result,
)

from factories import RunCli
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import hardware_to_dict
from lightspeed.hardware import catalog_hardware
from lightspeed.report.html import read_result, render_html, roofline
from lightspeed.report.html.markup import script_json

EVIL = "</script><script>alert('owned')</script><b>bold</b>"


@pytest.fixture(scope="module")
def profile_doc() -> dict[str, Any]:
    return tiny_profile()


def test_a_tiny_profile_report_is_one_offline_file_under_5_mb(profile_doc: dict[str, Any]) -> None:
    page = render_html(profile_doc, clock=fixed_clock())
    assert len(page.encode("utf-8")) < 5_000_000
    # Nothing is fetched: no script or link has a source, and the policy allows none.
    for fetching in ("<script src", "<link", '<img src="http', "@import", "url(http"):
        assert fetching not in page
    assert "default-src 'none'" in page and "connect-src 'none'" in page


def test_the_same_result_renders_the_same_file_apart_from_the_date(
    profile_doc: dict[str, Any],
) -> None:
    first = render_html(profile_doc, clock=fixed_clock(1)).splitlines()
    second = render_html(profile_doc, clock=fixed_clock(2)).splitlines()
    changed = [
        line
        for line in difflib.unified_diff(first, second, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed == [
        "-<footer>lightspeed 0.1.0; this page rendered 2026-11-01T12:00:00+00:00. One file,"
        " no network: every script, style and datum is inline.</footer>".replace(
            "0.1.0", str(profile_doc["lightspeed_version"])
        ),
        "+<footer>lightspeed 0.1.0; this page rendered 2026-11-02T12:00:00+00:00. One file,"
        " no network: every script, style and datum is inline.</footer>".replace(
            "0.1.0", str(profile_doc["lightspeed_version"])
        ),
    ]


def _with_evil_names(doc: dict[str, Any]) -> dict[str, Any]:
    evil = json.loads(json.dumps(doc))
    for op in evil["ops"][:5]:
        op["name"] = EVIL
        op["module"] = EVIL
    evil["modules"][EVIL] = evil["modules"][""]
    evil["workload"]["name"] = EVIL
    evil["findings"].append({"kind": EVIL, "message": EVIL, "evidence": {EVIL: EVIL}})
    return evil


def test_names_from_results_are_text_never_markup(profile_doc: dict[str, Any]) -> None:
    page = render_html(_with_evil_names(profile_doc), clock=fixed_clock())
    assert EVIL not in page
    assert "<script>alert" not in page and "<b>bold" not in page
    # Shown as text in the HTML, and carried to plotly as entities (which it shows as
    # the characters) inside JSON that escapes their ampersands.
    assert "&lt;/script&gt;&lt;script&gt;alert(&#x27;owned&#x27;)" in page
    assert "\\u0026lt;/script\\u0026gt;" in page


def test_script_json_cannot_close_its_element() -> None:
    text = script_json({"name": EVIL, "other": "a & b \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"name": EVIL, "other": "a & b \u2028"}


def test_a_trace_report_escapes_kernel_names() -> None:
    doc = trace_result(*TWO_RANKS)
    doc["ranks"][0]["kernels"][0]["name"] = EVIL
    if doc["ranks"][0].get("timeline"):
        doc["ranks"][0]["timeline"]["events"]["name"][0] = EVIL
        doc["ranks"][0]["timeline"]["lanes"][0]["name"] = EVIL
    doc["collectives"][0]["name"] = EVIL
    doc["ranks"][0]["rank"] = 'x" onmouseover="alert(1)'
    page = render_html(doc, clock=fixed_clock())
    assert EVIL not in page and "<script>alert" not in page
    assert 'onmouseover="' not in page


def test_every_kind_renders_with_its_sections(profile_doc: dict[str, Any]) -> None:
    profile_page = render_html(profile_doc, clock=fixed_clock())
    for chart in ("roofline", "phases", "modules", "memory-categories", "memory-over-step"):
        assert f'data-chart="{chart}"' in profile_page
    bench_page = render_html(bench_run(profile_doc), clock=fixed_clock())
    assert 'href="#w0-mlp-tiny"' in bench_page and 'id="w0-mlp-tiny"' in bench_page
    assert 'href="#w1-other--b-model--b-"' in bench_page  # a name made an id
    trace_page = render_html(trace_result(*TWO_RANKS), clock=fixed_clock())
    for chart in ("temporal", "idle", "timeline", "collective-waits", "last-arrivals"):
        assert f'data-chart="{chart}"' in trace_page
    assert 'id="rank-0"' in trace_page and 'id="rank-1"' in trace_page
    with_matmuls = render_html(trace_result(ONE_WITH_MATMULS), clock=fixed_clock())
    assert 'data-chart="roofline"' in with_matmuls
    assert (
        "time in their kernels" in with_matmuls and "share of their speed of light" in with_matmuls
    )


def test_a_cpu_trace_s_matrix_products_are_in_its_rank_section(tmp_path: Path) -> None:
    def event(cat: str, name: str, ts: int, dur: int, **args: Any) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1,
                "args": args}  # fmt: skip

    dims = {"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"]}
    events = [
        event("user_annotation", "ProfilerStep#1", 0, 100),
        event("user_annotation", "ProfilerStep#2", 100, 100),
        event("cpu_op", "aten::mm", 10, 30, **dims),
        event("cpu_op", "aten::mm", 110, 30, **dims),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    page = render_html(trace_result(path), clock=fixed_clock())
    assert "matrix products" in page and "time in their CPU ops" in page
    assert "65.5 kFLOP" in page  # 2·64·32·16, the first step's: the whole trace leaves out the last


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file; pass a result written with --json."),
        ("{not json", "not readable as JSON"),
        ("[1, 2]", "not a lightspeed result (a JSON object is expected)."),
        ('{"document": "timing", "schema_version": 3}', "a result of kind 'timing' has no"),
        ('{"document": "profile", "schema_version": 99}', "schema 99 is newer than this"),
        ('{"document": "profile"}', "no schema_version, so not a result lightspeed wrote."),
    ],
)
def test_a_bad_result_is_refused_in_one_line(
    tmp_path: Path, run_cli: RunCli, content: str | None, message: str
) -> None:
    path = tmp_path / "result.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        read_result(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    code, out, err = run_cli("report", str(path), "--html", str(tmp_path / "r.html"))
    assert (code, out) == (2, "")
    assert err.startswith("lightspeed: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


def test_a_damaged_result_is_refused_in_one_line(
    profile_doc: dict[str, Any], tmp_path: Path, run_cli: RunCli
) -> None:
    damaged = {k: v for k, v in profile_doc.items() if k != "ops"}
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(damaged))
    code, _, err = run_cli("report", str(path))
    assert code == 2
    assert err == (
        "lightspeed: error: the profile result is damaged (KeyError: 'ops'); write it again"
        " with --json.\n"
    )


def test_report_draws_a_saved_profile_as_the_profile_command_did(
    profile_doc: dict[str, Any], tmp_path: Path, run_cli: RunCli
) -> None:
    saved = tmp_path / "tiny.json"
    saved.write_text(json.dumps(profile_doc))
    code, _, err = run_cli("report", str(saved), "--json", str(tmp_path / "files.json"))
    assert code == 0 and f"wrote {tmp_path / 'tiny.html'}" in err
    files = json.loads((tmp_path / "files.json").read_text())
    assert (files["document"], files["result_document"]) == ("report", "profile")
    assert files["html"] == str(tmp_path / "tiny.html") and files["png"] is None
    drawn = (tmp_path / "tiny.html").read_text()
    again = render_html(profile_doc, clock=fixed_clock())
    # Only the footer's date differs.
    assert drawn.split("<footer>")[0] == again.split("<footer>")[0]


def test_png_is_the_roofline_as_an_image(profile_doc: dict[str, Any], tmp_path: Path) -> None:
    from PIL import Image

    from lightspeed.report.png import roofline_of, write_roofline_png

    path = write_roofline_png(tmp_path / "roof.png", profile_doc)
    image = Image.open(io.BytesIO(path.read_bytes()))
    assert image.format == "PNG" and image.width > 800 and image.height > 500
    grey_levels = [n for n in image.convert("L").histogram() if n]
    assert len(grey_levels) > 16  # points, roofs and text, not a blank image
    placed = roofline_of(profile_doc)
    with_work = [op for op in profile_doc["ops"] if op["flops"] and op["bytes"] and op["time_s"]]
    assert len(placed.points) == len(with_work)
    assert placed.left_out == len(profile_doc["ops"]) - len(with_work)


def test_png_of_a_trace_without_shapes_says_why(tmp_path: Path) -> None:
    from html_results import ONE_RANK

    from lightspeed.report.png import write_roofline_png

    with pytest.raises(ConfigError, match=r"record_shapes=True\."):
        write_roofline_png(tmp_path / "x.png", trace_result(ONE_RANK))
    assert not (tmp_path / "x.png").exists()


def test_save_html_writes_what_the_command_line_writes(tmp_path: Path) -> None:
    import lightspeed
    from factories import FAKE_CPU
    from lightspeed.report.html import write_html

    profile = lightspeed.profile("mlp-tiny", hardware=FAKE_CPU, steps=1, budget_s=0.1)
    saved = lightspeed.save_html(profile, tmp_path / "api.html").read_text()
    assert 'data-chart="roofline"' in saved and "mlp-tiny: speed-of-light profile" in saved
    analysis = lightspeed.analyse_traces(lightspeed.load_traces(list(TWO_RANKS)))
    traced = lightspeed.save_html(analysis, tmp_path / "trace.html").read_text()
    again = write_html(tmp_path / "again.html", trace_result(*TWO_RANKS)).read_text()

    def body(page: str) -> str:  # all but the dates it was made and rendered
        return page.split("</header>")[1].split("<footer>")[0]

    assert body(traced) == body(again)


def test_workloads_whose_names_read_alike_get_sections_of_their_own(
    profile_doc: dict[str, Any],
) -> None:
    doc = bench_run(profile_doc)
    first = json.loads(json.dumps(doc["results"][0]))
    doc["results"] = [
        {**first, "workload": {**first["workload"], "name": name}} for name in ("a.b", "a-b")
    ]
    page = render_html(doc, clock=fixed_clock())
    assert 'href="#w0-a-b"' in page and 'id="w0-a-b"' in page
    assert 'href="#w1-a-b"' in page and 'id="w1-a-b"' in page


def test_on_cuda_the_memory_chart_rises_to_the_allocators_peak() -> None:
    from lightspeed.report.html.memory_charts import ALLOCATOR_EXTRA, memory_over_step_figure

    over = {
        "op_index": [0, 1, 2, 3],
        "bytes": {"parameters": [10, 10, 10, 10], "activations": [0, 5, 20, 3]},
        "phases": [["forward", 0, 2], ["backward", 2, 4]],
    }
    # The allocator peaked at 45 bytes; the storages ops returned at 30 (after op 2).
    figure = memory_over_step_figure(over, 45)
    stacked = [sum(column) for column in zip(*(t["y"] for t in figure["data"]), strict=True)]
    assert max(stacked) == 45 and stacked.index(45) == 2
    extra = next(t for t in figure["data"] if t["name"] == ALLOCATOR_EXTRA)
    assert extra["y"] == [0, 0, 15, 0]
    # On the CPU the replay's peak is the profile's: nothing is added.
    assert len(memory_over_step_figure(over, 30)["data"]) == 2


def test_a_predicted_profile_shows_the_prediction_beside_its_measurement(
    profile_doc: dict[str, Any],
) -> None:
    from html_results import predicted_profile

    page = render_html(predicted_profile(profile_doc, "h100-sxm"))
    assert 'id="prediction"' in page and 'data-chart="prediction"' in page
    assert "mlp-tiny: predicted profile" in page
    assert "--hardware h100-sxm" in page and "not yet checked against a measurement" in page
    assert "from a cpu to a gpu" in page


def test_a_fused_prediction_shows_the_jobs_fused_beside_one_after_another(
    profile_doc: dict[str, Any],
) -> None:
    from html_results import predicted_profile

    doc = predicted_profile(profile_doc, "h100-sxm", fuse=8)
    fusion = doc["prediction"]["fusion"]
    assert fusion["jobs"] == 8
    page = render_html(doc)
    assert 'data-chart="fusion"' in page and "8 jobs one after another" in page
    assert "--fuse 8" in page and "largest K" in page
    verdict = "fusion pays" if fusion["helps"] else "fusion will not help"
    assert verdict in page


def test_a_sweep_shows_its_best_its_time_against_serial_and_every_trial() -> None:
    from html_results import sweep_result

    doc = sweep_result()
    page = render_html(doc)
    for anchor in ("summary", "time", "trials"):
        assert f'id="{anchor}"' in page
    for chart in ("sweep-time", "sweep-lr", "sweep-weight_decay"):
        assert f'data-chart="{chart}"' in page
    best = next(t for t in doc["trials"] if t["number"] == doc["best"])
    assert f"trial {best['number']}: lr=" in page
    table = page[page.index('data-table="sweep"') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 1 + len(doc["trials"])  # the header, then a row a trial


def test_a_gpu_with_matrix_peaks_has_a_roof_for_each() -> None:
    # An MI100 chart of fp32 work: the vector roof (23.1) and the matrix roof (46.1) are
    # drawn; the other precisions' roofs are in the legend only.
    roofs = roofline.roofs(hardware_to_dict(catalog_hardware("mi100")), {"fp32"}, ())
    shown = [r.name for r in roofs if r.shown]
    assert shown[:2] == ["fp32 peak 23.1 TFLOP/s", "fp32 matrix peak 46.1 TFLOP/s"]
    # The memory slope rises to the highest roof drawn: the matrix one.
    memory = next(r for r in roofs if r.name.startswith("memory"))
    assert memory.ys[-1] == 46.1e12


def test_a_trace_page_draws_every_step_and_lists_a_long_traces_ends_and_slowest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lightspeed.report.html import trace_steps
    from lightspeed.report.html.trace_page import trace_page

    doc = trace_result(TWO_RANKS[0])
    step = doc["ranks"][0]["steps"][0]
    times = [0.2 - 0.001 * i for i in range(40)]  # the first steps are the slowest...
    times[17] = 0.9  # ...but for one in the middle
    doc["ranks"][0]["steps"] = [
        {**step, "step": 100 + i, "step_s": t, "bound": "compute" if i % 3 else "overhead"}
        for i, t in enumerate(times)
    ]
    assert trace_steps.table_rows(1) == (2000, 50, 100)
    assert trace_steps.table_rows(64) == (31, 5, 5)  # 64 ranks' tables share the rows
    monkeypatch.setattr(trace_steps, "TABLE_STEPS", 24)
    monkeypatch.setattr(trace_steps, "TABLE_ENDS", 5)
    monkeypatch.setattr(trace_steps, "TABLE_SLOWEST", 5)
    page = trace_page(doc)
    chart = next(f for f in page.figures.values() if "Every step" in f["layout"]["title"]["text"])
    drawn = {x: y for t in chart["data"] for x, y in zip(t["x"], t["y"], strict=True)}
    assert drawn == {100 + i: t for i, t in enumerate(times)}  # every step, once
    assert {t["name"] for t in chart["data"]} == {"compute", "overhead"}
    assert chart["layout"]["xaxis"]["dtick"] == 5  # ticks on whole steps: 39 steps apart
    html = "".join(page.sections)
    table = html[html.index('data-table="steps"') :].split("</table>")[0]
    listed = table.count("<tr>") - 1  # less the header row
    assert listed == 5 + 5 + 1 + 2  # the ends, the slowest, and two gaps ("…")
    assert "900 ms" in table and "40 steps" in html and "bound: compute 26, overhead 14" in html


def test_a_long_trace_s_view_across_ranks_draws_every_step_and_lists_a_few(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lightspeed.report.html import across_ranks
    from lightspeed.report.html.trace_page import trace_page

    doc = trace_result(*TWO_RANKS)
    step, finding = doc["skew"][0], doc["findings"][0]
    spreads = [0.001 * (i % 5) for i in range(40)]
    doc["skew"] = [
        {**step, "step": i, "step_s": {"0": 0.5, "1": 0.5 + d}} for i, d in enumerate(spreads)
    ]
    gains = [1.0 + 0.01 * i for i in range(9)]
    doc["findings"] = [
        {**finding, "evidence": {**finding["evidence"], "max_speedup": g}} for g in gains
    ]
    monkeypatch.setattr(across_ranks, "table_rows", lambda: (12, 3, 3))
    page = trace_page(doc)
    chart = next(f for f in page.figures.values() if "slowest rank" in f["layout"]["title"]["text"])
    assert chart["data"][0]["x"] == list(range(40))
    assert chart["data"][0]["y"] == pytest.approx(spreads)
    html = "".join(page.sections)
    table = html[html.index('data-table="skew"') :].split("</table>")[0]
    # Steps 0-2 and 37-39, the most spread 4, 9 and 14, and a gap before each of these.
    assert table.count("<tr>") - 1 == 3 + 3 + 3 + 4
    shown = html[html.index("<h3>Findings</h3>", html.index('data-table="skew"')) :]
    assert shown.count('<span class="kind">collective-wait</span>') == 3
    assert "1.08× faster" in shown and "1.05× faster" not in shown  # the largest gains kept
    assert "… and 6 more collective-wait findings" in shown
