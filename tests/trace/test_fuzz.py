"""Fuzzing the trace reader and the analyses: truncated, mutated and wrongly-typed
traces either analyse or raise TraceError, never anything else."""

from __future__ import annotations

import gzip
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kineto import KinetoTrace
from trace_paths import trace

from factories import RunCli, examples
from lightspeed.errors import TraceError
from lightspeed.report import render_json
from lightspeed.report.trace_report import trace_document
from lightspeed.trace.analysis import analyse_traces
from lightspeed.trace.load import load_trace, load_traces
from lightspeed.trace.names import short_kernel_name

SOURCE = gzip.decompress(trace("hta-a100-cuda-event-sync").read_bytes())
DOCUMENT = json.loads(SOURCE)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
FUZZ = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def read_and_analyse(data: bytes, name: str = "t.json") -> None:
    """Load and analyse `data` as a trace file: a TraceError is the only failure allowed."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / name
        path.write_bytes(data)
        try:
            analyse_traces(load_traces([path]))
        except TraceError as exc:
            assert str(path) in str(exc)


@FUZZ
@given(st.integers(min_value=0, max_value=len(SOURCE)))
def test_truncated_json(cut: int) -> None:
    read_and_analyse(SOURCE[:cut])


@FUZZ
@given(st.integers(min_value=0, max_value=len(SOURCE)))
def test_truncated_gzip(cut: int) -> None:
    read_and_analyse(gzip.compress(SOURCE)[:cut], "t.json.gz")


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(SOURCE) - 1), st.integers(0, 255)), max_size=8))
def test_mutated_bytes(changes: list[tuple[int, int]]) -> None:
    data = bytearray(SOURCE)
    for position, value in changes:
        data[position] = value
    read_and_analyse(bytes(data))


@FUZZ
@given(st.data())
def test_wrongly_typed_fields(data: Any) -> None:
    document = json.loads(SOURCE)
    events = document["traceEvents"]
    for _ in range(data.draw(st.integers(1, 6))):
        event = events[data.draw(st.integers(0, len(events) - 1))]
        key = data.draw(st.sampled_from(["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]))
        event[key] = data.draw(json_values)
    read_and_analyse(json.dumps(document).encode())


@FUZZ
@given(json_values)
def test_any_json_document(value: Any) -> None:
    read_and_analyse(json.dumps(value).encode())


@FUZZ
@given(st.lists(json_values, max_size=6))
def test_any_events(events: list[Any]) -> None:
    read_and_analyse(json.dumps({**DOCUMENT, "traceEvents": events}).encode())


shapes = st.lists(
    st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=4) | json_values,
    max_size=5,
)
type_names = st.lists(
    st.sampled_from(["float", "c10::BFloat16", "c10::Half", "double", "int", "Scalar", ""])
    | json_values,
    max_size=5,
)


@FUZZ
@given(
    st.sampled_from(["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"]),
    shapes | json_values,
    type_names | json_values,
    st.sampled_from(["NVIDIA H100 80GB HBM3", "Tesla T4", "unknown"]),
)
def test_any_recorded_shapes(op: str, dims: Any, types: Any, device: str) -> None:
    t = KinetoTrace(device_name=device)
    t.step(1, 0, 100)
    t.cpu_op(op, 0, 10, **{"Input Dims": dims, "Input type": types})
    t.launch(2, 20, 5)
    read_and_analyse(json.dumps(t.document()).encode())


def _error_or_analysis(tmp_path: Path, text: str) -> str | None:
    """The TraceError message of reading and analysing `text`, or None if it analysed."""
    path = tmp_path / "t.json"
    path.write_text(text)
    try:
        analyse_traces(load_traces([path]))
    except TraceError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    "document",
    [
        "[" * 100_000 + "]" * 100_000,  # the whole document nested
        '{"traceEvents": [' + "[" * 5_000 + "]" * 5_000 + "]}",  # an event nested
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1,'
        ' "args": ' + '{"a": ' * 5_000 + "1" + "}" * 5_000 + "}]}",  # an event's args
    ],
)
@pytest.mark.timeout(60)  # a hang guard: these end in under a second
def test_deep_nesting_is_a_trace_error(tmp_path: Path, document: str) -> None:
    message = _error_or_analysis(tmp_path, document)
    assert message is not None and "nests arrays or objects thousands of levels deep" in message


@pytest.mark.timeout(60)  # a hang guard: a retry per chunk made this quadratic
def test_a_huge_name_is_read_and_analysed(tmp_path: Path) -> None:
    name = "k" * 5_000_000
    event = {"ph": "X", "cat": "kernel", "name": name, "ts": 1, "dur": 2, "args": {"stream": 7}}
    assert _error_or_analysis(tmp_path, json.dumps({"traceEvents": [event]})) is None


def test_non_finite_times_and_kernels_without_launches(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": 1, "args": {"stream": 7}}
        for ts in ("NaN", "1e999", 5, 9)
    ]
    text = json.dumps({"traceEvents": events}).replace('"NaN"', "NaN").replace('"1e999"', "1e999")
    path = tmp_path / "t.json"
    path.write_text(text)
    (rank,) = analyse_traces(load_traces([path])).ranks
    # The two finite kernels are read (the others counted as malformed), no launch found.
    assert rank.whole.temporal.total_s == pytest.approx(5e-6)  # 5 → 10 µs
    assert any("could not be read" in note for note in rank.notes)


@pytest.mark.parametrize("parallel", [False, True])
def test_bytes_that_are_not_utf8_are_read_as_u_fffd_and_counted(
    tmp_path: Path, parallel: bool
) -> None:
    # A kernel's name cut inside a character, as a profiler can write it: the trace reads
    # as its twin that holds U+FFFD there, with a note; read by one process or two.
    kernel = next(e for e in DOCUMENT["traceEvents"] if e.get("cat") == "kernel")
    name = json.dumps(kernel["name"]).encode()
    assert SOURCE.count(name) >= 1 and name[-2:-1].isascii()
    documents = []
    for folder, replaced in (("bad", b"\xe2\x82"), ("twin", "\ufffd".encode())):
        path = tmp_path / folder / "t.json"
        path.parent.mkdir()
        path.write_bytes(SOURCE.replace(name, name[:-2] + replaced + b'"', 1))
        traces = load_traces([path]) if not parallel else [load_trace(path, parallel=True)]
        assert traces[0].not_utf8 == (folder == "bad")  # counted once, by one of two readers
        assert sum("\ufffd" in n for n in traces[0].names) == 1
        data = json.loads(render_json.dumps_utf8(trace_document(analyse_traces(traces)).data))
        documents.append(data)
    bad, twin = documents
    (note,) = set(bad["ranks"][0].pop("notes")) - set(twin["ranks"][0].pop("notes"))
    assert note.startswith("1 byte sequence of the file is not UTF-8 text")
    for document in documents:
        document["ranks"][0].pop("path")
    assert bad == twin


def test_kernel_names_are_shortened_for_reports() -> None:
    assert short_kernel_name("void at::native::f<float, 4>(int, float*)") == "at::native::f"
    long = short_kernel_name("k" * 5_000_000)
    assert len(long) == 120 and long.endswith("…")


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_binary_data_is_one_line_and_exit_2(tmp_path: Path, name: str, run_cli: RunCli) -> None:
    path = tmp_path / name
    path.write_bytes(random.Random(0).randbytes(1 << 20))
    code, _, err = run_cli("trace", str(path))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("lightspeed: error: ") and str(path) in line
    assert "not UTF-8 text; is it a profiler trace, not a binary file?" in line


@pytest.mark.timeout(120)  # a hang guard; the time is in docs/benchmarks.md
def test_a_50_mb_string_is_read_and_analysed(tmp_path: Path) -> None:
    event = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": {"stream": 7}}
    event["args"]["note"] = "x" * 50_000_000
    assert _error_or_analysis(tmp_path, json.dumps({"traceEvents": [event]})) is None


@pytest.mark.timeout(120)  # a hang guard; the time is in docs/benchmarks.md
def test_a_million_zero_length_kernels_are_analysed(tmp_path: Path) -> None:
    path = tmp_path / "zero.json"
    path.write_text(zero_length_kernels(1_000_000))
    (rank,) = analyse_traces(load_traces([path])).ranks
    assert rank.whole.temporal.total_s == pytest.approx((1_000_000 - 1) * 1e-6)
    assert rank.whole.temporal.busy_s == 0


def zero_length_kernels(count: int) -> str:
    """A trace of `count` kernels that last no time, one per µs."""
    event = (
        '{"ph":"X","cat":"kernel","name":"k","ts":%d,"dur":0,"pid":0,"tid":7,'
        '"args":{"stream":7,"correlation":%d}}'
    )
    return '{"traceEvents": [' + ",".join(event % (i, i) for i in range(count)) + "]}"
