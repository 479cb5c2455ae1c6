"""Reading Kineto traces: streaming, every real variant, clear errors on bad files."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from trace_paths import SHARED_TRACES, TRACES, trace

from lightspeed.errors import TraceError
from lightspeed.trace.events import Kind
from lightspeed.trace.json_stream import TraceStream
from lightspeed.trace.load import load_trace, load_traces


def test_streamed_events_are_the_documents_events() -> None:
    path = trace("hta-a100-alexnet-benchmark")
    document = json.loads(gzip.decompress(path.read_bytes()))
    stream = TraceStream(path, chunk_chars=4096)  # many chunk boundaries
    assert list(stream.events()) == document["traceEvents"]
    assert stream.metadata == {k: v for k, v in document.items() if k != "traceEvents"}


def test_a_bare_event_array_and_a_trailing_comma_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},]')
    assert list(TraceStream(path).events()) == [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}
    ]


def test_kinds_and_columns_of_a_real_trace() -> None:
    t = load_trace(trace("hta-a100-cuda-event-sync"))
    assert t.rank == 0
    assert {k: len(t.table(k)) for k in (Kind.KERNEL, Kind.MEMCPY, Kind.SYNC)} == {
        Kind.KERNEL: 4,
        Kind.MEMCPY: 1,
        Kind.SYNC: 4,
    }
    kernels = t.table(Kind.KERNEL)
    # The first kernel: a fill on stream 7 of GPU 0 at ts 1707417525512145, 1 µs long.
    first = int(np.argmin(kernels.ts_us))
    assert (kernels.pid[first], kernels.tid[first], kernels.dur_us[first]) == (0, 7, 1.0)
    assert "FillFunctor" in t.names[kernels.name[first]]
    assert t.skipped["ac2g"] == 21  # flow arrows are counted, not kept


def test_rank_comes_from_the_file_name_when_the_trace_has_none(tmp_path: Path) -> None:
    source = trace("hta-mi250-minitoy-train")
    copy = tmp_path / "job_rank7.json.gz"
    copy.write_bytes(source.read_bytes())
    (only,) = load_traces([tmp_path])
    assert only.rank == 7
    assert only.device_names  # deviceProperties names the MI250


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("{", "ends in the middle"),
        ('{"traceEvents": [{"ph": "X"', "truncated"),
        ('{"traceEvents": [{"ph": "X"}] junk', "expected '}' but found 'j'"),
        ('{"traceEvents": []} junk', "data after the end"),
        ('{"traceEvents": []}', "holds no trace events"),
        ('{"traceEvents": 5}', "not an array"),
        ("hello", "not a JSON object or array"),
        ('{"traceEvents": [{"a": tru}]}', "not valid JSON"),
    ],
)
def test_bad_files_get_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(TraceError, match=message) as info:
        load_trace(path)
    assert str(path) in str(info.value)


def test_events_that_cannot_be_read_are_counted_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1e999999, "dur": 1},  # ts infinite
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": -1},  # negative duration
        {"ph": "X", "cat": "kernel", "name": ["k"], "ts": 5, "dur": 1},  # name not a string
        "not an event",
        {"ph": "X", "cat": "kernel", "name": "k", "ts": "7.5", "dur": 2, "pid": "GPU 0"},
    ]
    path.write_text(json.dumps({"traceEvents": events}).replace("Infinity", "1e999999"))
    t = load_trace(path)
    assert (t.event_count, t.malformed, len(t.table(Kind.KERNEL))) == (5, 4, 1)
    kernels = t.table(Kind.KERNEL)
    assert kernels.ts_us.tolist() == [7.5] and kernels.pid[0] < 0  # a named pid gets an id


def test_truncated_and_corrupt_gzip_name_the_file(tmp_path: Path) -> None:
    data = trace("hta-a100-alexnet-benchmark").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match=r"cut\.json\.gz: the gzip data is truncated"):
        load_trace(cut)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(TraceError, match=r"bad\.json\.gz"):
        load_trace(bad)


def test_two_traces_of_one_rank_are_an_error(tmp_path: Path) -> None:
    for run in ("a", "b"):  # two runs of rank 0 side by side
        (tmp_path / f"run-{run}.json.gz").write_bytes(
            trace("hta-a100-cuda-event-sync").read_bytes()
        )
    with pytest.raises(TraceError, match=r"run-a\.json\.gz and .*run-b\.json\.gz are both rank 0"):
        load_traces([tmp_path])


def test_a_directory_with_kineto_traces_reads_only_those(tmp_path: Path) -> None:
    source = trace("hta-a100-cuda-event-sync").read_bytes()
    (tmp_path / "host_1.1700000000.pt.trace.json.gz").write_bytes(source)
    (tmp_path / "config.json").write_text('{"lr": 0.1}')  # not a trace
    (only,) = load_traces([tmp_path])
    assert only.path.endswith(".pt.trace.json.gz")


def test_missing_paths_and_empty_directories(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_traces([tmp_path / "nope.json"])
    with pytest.raises(TraceError, match=r"no \*\.json or \*\.json\.gz trace files"):
        load_traces([tmp_path])


def test_the_test_copies_are_the_shared_files() -> None:
    if not SHARED_TRACES.is_dir():
        pytest.skip("LIGHTSPEED_SHARED_TRACES names no directory")
    for copy in TRACES.glob("*.json.gz"):
        assert copy.read_bytes() == (SHARED_TRACES / copy.name).read_bytes()


def test_reading_on_two_processes_gives_the_same_trace() -> None:
    path = trace("hta-v100-ddp-cnn-train-rank0")
    one = load_trace(path, parallel=False)
    two = load_trace(path, parallel=True, chunk_chars=1 << 16)  # many runs per process
    assert (one.event_count, one.names, one.skipped) == (two.event_count, two.names, two.skipped)
    for kind in Kind:
        a, b = one.table(kind), two.table(kind)
        assert np.array_equal(a.ts_us, b.ts_us) and np.array_equal(a.name, b.name), kind
        assert np.array_equal(a.correlation, b.correlation), kind


def test_recorded_shapes_survive_reading_on_two_processes() -> None:
    path = trace("tracelens-h100-bert-small-inference")
    one = load_trace(path, parallel=False)
    two = load_trace(path, parallel=True, chunk_chars=1 << 14)
    assert len(one.op_shapes) == 26 and one.op_shapes == two.op_shapes
    ops = two.table(Kind.CPU_OP)
    assert {two.names[ops.name[row]] for row in two.op_shapes} == {"aten::addmm"}


def test_a_run_cut_inside_a_string_falls_back_to_one_process(tmp_path: Path) -> None:
    # Every name holds "}, {", so the last one in a window is often inside a string:
    # that run cannot decode, and the file is read again on one process.
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}}}, {{x", "ts": i, "dur": 1, "pid": 0}
        for i in range(3000)
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    two = load_trace(path, parallel=True, chunk_chars=4096)
    one = load_trace(path, parallel=False, chunk_chars=4096)
    assert len(two.table(Kind.KERNEL)) == 3000 == len(one.table(Kind.KERNEL))
    assert two.names == one.names


def test_memory_stays_well_below_the_decompressed_trace() -> None:
    path = trace("hta-v100-ddp-cnn-train-rank0")
    decompressed = len(gzip.decompress(path.read_bytes()))  # 15.4 MB of JSON
    tracemalloc.start()
    try:
        load_trace(path, parallel=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Columns (about 2.5 MB here) and one window's decoded events: 39 % when measured.
    assert peak < 0.5 * decompressed
