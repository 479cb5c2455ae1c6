"""`trace.trim`: a written trace cut to its first whole steps under a size limit, each
kept step with its kernels, the rest of the document whole."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kineto import KinetoTrace

from lightspeed.trace.analysis import analyse_rank
from lightspeed.trace.load import load_trace
from lightspeed.trace.trim import trim_trace


def _four_steps() -> KinetoTrace:
    # Steps of 100 µs on the host; each launches a kernel at its start that the device
    # runs 150 µs later, inside the next step's host time.
    t = KinetoTrace(device_name="NVIDIA H100 80GB HBM3")
    for i in range(4):
        at = 100 * i
        t.step(i + 1, at, 100)
        t.cpu_op("aten::mm", at + 5, 20)
        t.launch(at + 10, at + 160, 30)
    return t


def _sizes(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return sum(len(json.dumps(e)) for e in json.load(f)["traceEvents"])


def test_a_trace_is_cut_to_its_first_steps_with_their_kernels(tmp_path: Path) -> None:
    path = _four_steps().write(tmp_path / "t.json")
    before = analyse_rank(load_trace(path))
    whole = _sizes(path)
    # Room for a bit more than half the events: two steps of four.
    cut = trim_trace(path, int(whole * 0.6))
    assert cut is not None
    assert (cut.steps_kept, cut.steps_recorded) == (2, 4)
    assert cut.bytes_kept <= whole * 0.6 < cut.bytes_recorded
    after = analyse_rank(load_trace(path))
    assert [s.step for s in after.steps] == [1, 2]
    # Step 2's kernel runs at 260–290 µs, after step 3 began on the host: it is kept.
    kernels = [e for e in json.loads(path.read_text())["traceEvents"] if e["cat"] == "kernel"]
    assert [k["ts"] for k in kernels] == [160, 260]
    assert after.steps[0].step_s == before.steps[0].step_s
    assert json.loads(path.read_text())["deviceProperties"][0]["name"] == "NVIDIA H100 80GB HBM3"


def test_a_trace_within_the_limit_is_left_alone(tmp_path: Path) -> None:
    path = _four_steps().write(tmp_path / "t.json")
    text = path.read_bytes()
    assert trim_trace(path, 10**9) is None
    assert path.read_bytes() == text


def test_a_gzipped_trace_stays_gzipped_and_keeps_one_step_at_least(tmp_path: Path) -> None:
    plain = _four_steps().write(tmp_path / "t.json")
    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    cut = trim_trace(path, 1)
    assert cut is not None and cut.steps_kept == 1
    assert [s.step for s in analyse_rank(load_trace(path)).steps] == [1]


def test_a_small_gzipped_trace_is_judged_by_its_trailer(tmp_path: Path) -> None:
    from lightspeed.trace import trim

    plain = _four_steps().write(tmp_path / "t.json")
    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    assert trim._document_bytes(path) == plain.stat().st_size
    assert trim._document_bytes(plain) == plain.stat().st_size
