"""Events decoded by msgspec into typed structs give the columns their dicts give:
`columns.decode_events` takes a run of events as `Event`s where every field has the
type Kineto writes, and as orjson's dicts otherwise; `build_part` must make the same
`Part` of either."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
from hypothesis import given
from hypothesis import strategies as st

from lightspeed.trace.columns import Event, Part, build_part, decode_events

big_ints = st.integers(min_value=-(2**70), max_value=2**70)
odd = (
    st.none()
    | st.booleans()
    | big_ints
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
args = st.fixed_dictionaries(
    {},
    optional={
        "correlation": st.integers(-5, 2**65) | odd,
        "External id": st.integers(-5, 2**65) | odd,
        "stream": st.integers(-2, 2**64) | odd,
        "Input Dims": st.lists(st.lists(big_ints, max_size=3), max_size=3) | odd,
        "Input type": st.lists(st.sampled_from(["float", "c10::Half", ""]), max_size=3) | odd,
        "Comms Id": big_ints,
    },
)
events = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "M"]) | odd,
        "cat": st.sampled_from(
            ["kernel", "cpu_op", "cuda_runtime", "Kernel", "KERNEL", "gpu_memcpy"]
        )
        | odd,
        "name": st.sampled_from(["gemm", "aten::mm", "cudaLaunchKernel", "aten::addmm"]) | odd,
        "ts": st.integers(0, 10**6) | st.floats(0, 1e6) | odd,
        "dur": st.integers(-1, 10**4) | st.floats(-1, 1e4) | odd,
        "pid": st.integers(-3, 2**64) | odd,
        "tid": st.integers(-3, 2**64) | odd,
        "args": args | odd,
    },
)


def _same(a: Part, b: Part) -> None:
    assert a.ints.keys() == b.ints.keys() and a.floats.keys() == b.floats.keys()
    for kind in a.ints:
        assert np.array_equal(a.ints[kind], b.ints[kind])
        assert np.array_equal(a.floats[kind], b.floats[kind])
    assert (a.op_shapes, a.shapes, a.names, a.labels) == (b.op_shapes, b.shapes, b.names, b.labels)
    assert (a.skipped, a.malformed, a.count) == (b.skipped, b.malformed, b.count)


@given(st.lists(events, min_size=1, max_size=8))
def test_typed_events_make_the_part_their_dicts_make(found: list[dict[str, Any]]) -> None:
    text = json.dumps(found)
    try:
        decoded = decode_events(text)
    except orjson.JSONDecodeError:  # integers beyond 64 bits: the reader's careful loop
        return
    try:  # what the reader read before: orjson, or where it refuses, the standard library
        before = orjson.loads(text)
    except orjson.JSONDecodeError:
        before = json.loads(text)
    _same(build_part(decoded), build_part(before))


def test_well_typed_events_are_decoded_as_structs_and_others_as_dicts() -> None:
    kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 5, "dur": 2, "pid": 0, "tid": 7}
    assert all(type(e) is Event for e in decode_events(orjson.dumps([kernel]).decode()))
    # A pid written as a float: valid JSON, read by the dict path, which gives it a label.
    odd_pid = decode_events(orjson.dumps([{**kernel, "pid": 0.5}]).decode())
    assert type(odd_pid[0]) is dict
    assert build_part(odd_pid).labels == ["0.5"]
