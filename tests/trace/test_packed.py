"""Results packed as columns (`trace.packed`, `analysis.StepAnalyses`) are made again
equal to what was packed, of the same types, after a pickle too."""

from __future__ import annotations

import dataclasses
import enum
import math
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from trace_paths import TRACES

from lightspeed.trace import analysis, load_trace
from lightspeed.trace.analysis import StepAnalyses
from lightspeed.trace.packed import dumps, pack, record
from lightspeed.trace.window import Fields, TraceContext, plain


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Pair(enum.Enum):  # a member's value a container: written as one, not as a scalar
    ONE = (1, "one")
    TWO = (2, "two")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    x: float
    label: str | None
    tags: tuple[int, ...]


@dataclasses.dataclass
class Loose:
    y: int
    z: list[str]


@dataclasses.dataclass(frozen=True)
class Derived:
    a: int
    b: int = dataclasses.field(init=False, default=0)


SHARED = "one string all share"
scalars = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-(2**70), 2**70)
    | st.booleans()
    | st.none()
    | st.text(max_size=3)
    | st.just(SHARED)
    | st.sampled_from(Colour)
    | st.sampled_from(Pair)
    | st.lists(st.integers(-5, 5), max_size=3).map(lambda v: np.array(v, dtype=np.int64))
    | st.integers(0, 3).map(Derived)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
        | st.builds(
            Point,
            x=st.floats(allow_nan=False),
            label=st.none() | st.text(max_size=2),
            tags=st.lists(st.integers(0, 9), max_size=3).map(tuple),
        )
        | st.builds(Loose, y=st.integers(-3, 3), z=st.lists(st.text(max_size=2), max_size=2))
    ),
    max_leaves=12,
)
# Many values of one shape, as a long trace's results are, and values of any shape.
alike = values.flatmap(lambda v: st.lists(st.just(v), min_size=1, max_size=5)) | st.lists(
    values, max_size=6
)


def _same(a: Any, b: Any, where: str = "") -> None:
    """`a` and `b` equal and of the same types all through (a float's sign and a NaN
    included)."""
    assert type(a) is type(b), (where, a, b)
    if isinstance(a, float):
        assert math.copysign(1, a) == math.copysign(1, b) and (a == b or (a != a and b != b))
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.tolist() == b.tolist(), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{k}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, (where, a, b)


@given(alike)
def test_packed_values_are_made_again_the_same(found: list[Any]) -> None:
    column = pack(found)
    assert len(column) == len(found)
    again = pickle.loads(pickle.dumps(column))
    for i, value in enumerate(found):
        _same(column[i], value, f"[{i}]")
        _same(again[i], value, f"pickled [{i}]")
    _same(column.values(), found, "all at once")
    _same(again.values(), found, "pickled, all at once")
    if found:
        _same(column[-1], found[-1])


@given(alike)
def test_packed_values_are_written_as_each_value_is(found: list[Any]) -> None:
    # A dataclass as the dict of its fields (a list of them, each), from the columns.
    _same(pack(found).plain_values(), [plain(v) for v in found])


def _writable(value: Any) -> bool:
    try:
        dumps(value)
    except TypeError:  # an array, or an integer beyond 64 bits: no JSON report holds one
        return False
    return True


@given(alike.filter(lambda found: all(map(_writable, found))))
@example([Pair.ONE, Pair.TWO, Colour.RED, "a,\n  b", None, 1.5])
def test_packed_values_json_texts_are_what_orjson_writes_of_each(found: list[Any]) -> None:
    assert pack(found).texts() == [dumps(v) for v in found]


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start


@given(
    st.lists(
        st.builds(Span, st.floats(-9, 9), st.floats(-9, 9)).flatmap(
            lambda span: st.sampled_from([span, [span, span], None])
        ),
        max_size=5,
    )
)
def test_a_result_s_properties_are_written_from_the_columns_too(found: list[Any]) -> None:
    written = Fields((("length", "length"),))
    _same(written.column(pack(found)), [written(v) for v in found])
    assert written.texts(pack(found)) == [dumps(written(v)) for v in found]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Facts:
    a: float
    b: int = 0
    c: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SlottedFacts:
    a: float
    b: int = 0
    c: dict[str, int] = dataclasses.field(default_factory=dict)


@pytest.mark.parametrize("kind", [Facts, SlottedFacts])
def test_one_record_is_what_its_init_makes(kind: type) -> None:
    for fields in ({"a": 1.0}, {"a": 1.0, "b": 2, "c": {"x": 1}}):
        _same(record(kind, fields), kind(**fields))
    assert record(kind, {"a": 1.0}).c is not record(kind, {"a": 1.0}).c  # a new default
    with pytest.raises(dataclasses.FrozenInstanceError):
        record(kind, {"a": 1.0}).b = 3
    for wrong in ({}, {"a": 1.0, "z": 1}):  # a field missing, a field unknown
        with pytest.raises(TypeError):
            record(kind, wrong)


def test_floats_of_many_values_take_eight_bytes_each() -> None:
    column = pack([float(i) for i in range(10_000)])
    assert len(pickle.dumps(column)) < 8 * 10_000 + 1_000


def test_a_rank_s_packed_steps_are_its_steps() -> None:
    trace = load_trace(TRACES / "hta-a100-ddp-train-rank0of2.json.gz")
    steps = [analysis.analyse_window(c) for c in analysis.step_contexts(TraceContext(trace))]
    packed = StepAnalyses.joined([StepAnalyses.of(steps[:2]), StepAnalyses.of(steps[2:])])
    _same(list(analysis.analyse_steps(analysis.step_contexts(TraceContext(trace)))), steps)
    assert len(packed) == len(steps) > 2
    _same(list(packed), steps)
    _same(list(pickle.loads(pickle.dumps(packed))), steps)
    _same(packed[-1], steps[-1])
    _same(packed[1:3], steps[1:3])
    assert packed.numbers == [w.step for w in steps]
    assert packed.bounds == [w.bound for w in steps]
    assert packed.step_s.tolist() == [w.step_s for w in steps]
    assert packed.has_device.tolist() == [w.has_device for w in steps]
    # Each step's JSON object made from the columns is the one made from the step.
    written = [analysis.window_data(w) for w in steps]
    assert [packed.data(i) for i in range(len(packed))] == written
    assert packed.texts(0, len(packed)) == [dumps(w) for w in written]
    assert packed.texts(1, 2) == [dumps(written[1])]
