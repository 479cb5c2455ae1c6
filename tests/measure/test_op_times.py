"""Per-op times from a profiled step, matched to the ops a dispatch mode captured.

The alignment is tested on hand-built event lists with exact expected indices; the
profiling end to end on tiny suite workloads, against the invariants a correct
attribution must keep (matched ops do not nest, so their inclusive CPU times fit in the
step; nothing is dropped).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from factories import examples
from lightspeed import suite
from lightspeed.errors import WorkloadError
from lightspeed.facts.device import Device
from lightspeed.measure.op_alignment import OpEvent, align_ops, op_key
from lightspeed.measure.op_times import OpTimes, at_timed_step, profile_op_times
from lightspeed.measure.step import PreparedStep, StepSettings, prepare

# Ops only a run under a Python dispatch mode makes, so no profiled event can match them:
# `record_function`'s bookkeeping ops (the optimizer's zero_grad/step ranges), and the
# `detach` autograd applies to an op's output saved for backward while a mode is active.
MODE_ONLY = frozenset(
    {"profiler::_record_function_enter_new", "profiler::_record_function_exit", "aten::detach"}
)

# A tree of events: (name, children). Each event spans its children plus one ns each side.
Tree = tuple[str, Sequence["Tree"]]


def flatten(
    trees: Sequence[Tree], *, thread: int = 1, start_ns: int = 0, base: int = 0
) -> list[OpEvent]:
    """The events of `trees` laid end to end from `start_ns` on one thread, parents first.

    `base` is where these events will start in the full event list (parents are indices).
    """
    events: list[OpEvent] = []
    _lay(trees, events, thread, start_ns, None, base)
    return events


def _lay(
    trees: Sequence[Tree], events: list[OpEvent], thread: int, t: int, parent: int | None, base: int
) -> int:
    for name, children in trees:
        index = len(events)
        events.append(OpEvent(name=name, start_ns=t, end_ns=t, parent=parent, thread=thread))
        end = _lay(children, events, thread, t + 1, base + index, base) + 1
        events[index] = dataclasses.replace(events[index], end_ns=end)
        t = end + 1
    return t


def leaves(*names: str) -> list[Tree]:
    return [(name, ()) for name in names]


# --- alignment on synthetic events ------------------------------------------------------


def test_identical_sequences_match_one_to_one() -> None:
    names = ["aten::mm", "aten::add", "aten::relu", "aten::mm"]
    assert align_ops(names, flatten(leaves(*names))) == [0, 1, 2, 3]


def test_a_missing_event_leaves_only_its_op_unmatched() -> None:
    # Adam's per-parameter update with the first mul_ missing: the second mul_ must not
    # be taken for the first one, or every later op would shift by one.
    names = ["aten::add_", "aten::mul_", "aten::lerp_", "aten::mul_", "aten::addcmul_"]
    events = flatten(leaves("aten::add_", "aten::lerp_", "aten::mul_", "aten::addcmul_"))
    assert align_ops(names, events) == [0, None, 1, 2, 3]


def test_an_extra_event_is_skipped() -> None:
    names = ["aten::mm", "aten::add", "aten::relu", "aten::copy_"]
    events = flatten(leaves("aten::mm", "aten::copy_", "aten::add", "aten::relu", "aten::copy_"))
    assert align_ops(names, events) == [0, 2, 3, 4]


def test_captured_ops_match_inside_a_composite_and_their_internals_do_not() -> None:
    # aten::linear decomposes into t and addmm before a dispatch mode sees it; the
    # transpose inside aten::t is t's own work and must not take the later transpose.
    linear: Tree = (
        "aten::linear",
        [
            ("aten::t", [("aten::transpose", leaves("aten::as_strided"))]),
            ("aten::addmm", leaves("aten::expand", "aten::copy_")),
        ],
    )
    events = flatten([linear, ("aten::transpose", ())])
    assert [e.name for e in events] == [
        "aten::linear",  # 0
        "aten::t",  # 1
        "aten::transpose",  # 2, inside t
        "aten::as_strided",  # 3
        "aten::addmm",  # 4
        "aten::expand",  # 5
        "aten::copy_",  # 6
        "aten::transpose",  # 7, top level
    ]
    assert align_ops(["aten::t", "aten::addmm", "aten::transpose"], events) == [1, 4, 7]


def test_internals_of_an_unmatched_op_do_not_match_either() -> None:
    # The first add is an extra event; the copy_ inside it is add's work, not the
    # captured copy_, which comes after the mm.
    events = flatten([("aten::add", leaves("aten::copy_")), *leaves("aten::mm", "aten::copy_")])
    events += flatten(leaves("aten::add"), start_ns=events[-1].end_ns + 1)
    assert align_ops(["aten::mm", "aten::copy_", "aten::add"], events) == [2, 3, 4]


def test_events_of_two_threads_interleave_by_start_time() -> None:
    # Forward mm on the main thread, backward (two mm) on the autograd engine's thread,
    # then the optimizer's add_ on the main thread again; listed thread by thread.
    backward = flatten(
        [("autograd::engine::evaluate_function: MmBackward0", leaves("aten::mm", "aten::mm"))],
        thread=2,
        start_ns=100,
        base=2,
    )
    main = [
        OpEvent(name="aten::mm", start_ns=0, end_ns=50, parent=None, thread=1),
        OpEvent(name="aten::add_", start_ns=500, end_ns=510, parent=None, thread=1),
    ]
    events = main + backward
    names = ["aten::mm", "aten::mm", "aten::mm", "aten::add_"]
    assert align_ops(names, events) == [0, 3, 4, 1]


def test_in_place_and_out_of_place_variants_match() -> None:
    # Autograd accumulates gradients with add under a dispatch mode, add_ without one.
    assert op_key("aten::add_") == op_key("aten::add") == "aten::add"
    assert op_key("aten::__and__") == "aten::__and__"
    names = ["aten::native_layer_norm_backward", "aten::add", "aten::mm"]
    events = flatten(leaves("aten::native_layer_norm_backward", "aten::add_", "aten::mm"))
    assert align_ops(names, events) == [0, 1, 2]


def test_a_long_run_of_extra_events_is_resynchronised() -> None:
    # 40 unexpected mm events: more than the look-ahead window can skip in one step.
    names = ["aten::mm", "aten::relu", "aten::sum", "aten::view", "aten::mul", "aten::div"]
    events = flatten(leaves("aten::mm", *["aten::mm"] * 40, *names[1:]))
    assert align_ops(names, events, window=8) == [0, 41, 42, 43, 44, 45]


def test_ops_without_any_event_stay_unmatched() -> None:
    names = ["profiler::_record_function_enter_new", "aten::mm", "aten::detach", "aten::relu"]
    assert align_ops(names, flatten(leaves("aten::mm", "aten::relu"))) == [None, 0, None, 1]
    assert align_ops(names, []) == [None] * 4


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.sampled_from(["aten::mm", "aten::add", "aten::mul", "aten::relu"]), max_size=40),
    st.data(),
)
def test_matches_keep_order_and_names_and_never_nest(names: list[str], data: Any) -> None:
    kept = [n for n in names if data.draw(st.booleans(), label="kept")]
    events = flatten([(n, leaves("aten::add")) for n in kept])  # each op calls an add inside
    result = align_ops(names, events)
    matched = [k for k in result if k is not None]
    assert all(
        op_key(events[k].name) == op_key(n)
        for n, k in zip(names, result, strict=True)
        if k is not None
    )
    assert matched == sorted(set(matched))  # in order, each event once
    # Every child here is an op's internals: never matched, so no time counts twice.
    assert all(events[k].parent is None for k in matched)
    if kept == names:
        assert result == [2 * i for i in range(len(names))]


# --- profiling a real step --------------------------------------------------------------


class NameRecorder(TorchDispatchMode):
    """Records the schema name of every op dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.names.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def captured(prepared: PreparedStep) -> list[str]:
    """The op names of one step, after a warm-up step that creates the optimizer state."""
    prepared.step()
    with NameRecorder() as recorder:
        prepared.step()
    return recorder.names


@pytest.fixture(scope="module", params=["mlp-tiny", "gpt2-tiny"])
def profiled(request: pytest.FixtureRequest) -> Iterator[tuple[list[str], OpTimes]]:
    torch.manual_seed(0)
    prepared = prepare(suite.get(request.param), StepSettings())
    names = captured(prepared)
    yield names, profile_op_times(prepared, names)


def test_every_real_op_is_matched(profiled: tuple[list[str], OpTimes]) -> None:
    names, times = profiled
    unmatched = {n for n, t in zip(names, times.times_s, strict=True) if t is None}
    assert unmatched <= MODE_ONLY
    real = [t for n, t in zip(names, times.times_s, strict=True) if n not in MODE_ONLY]
    assert sum(t is not None for t in real) >= 0.95 * len(real)
    # mlp-tiny: 10 of its 113 captured ops are MODE_ONLY artifacts, gpt2-tiny 10 of 363.
    assert times.matched >= 0.9 * len(names)
    assert len(times.times_s) == len(names)


def test_matched_times_fit_in_the_step(profiled: tuple[list[str], OpTimes]) -> None:
    _, times = profiled
    matched = [t for t in times.times_s if t is not None]
    assert all(t >= 0 for t in matched)
    assert times.attributed_s == pytest.approx(sum(matched), rel=1e-12)
    # Matched CPU events never nest, so their inclusive times cannot exceed the step.
    assert times.attributed_s <= times.profiled_step_s * (1 + 1e-6)
    assert times.attributed_s + times.unattributed_s == times.profiled_step_s
    assert times.unattributed_s >= 0
    assert (times.steps, times.device_time) == (1, False)


def test_several_steps_give_per_op_medians() -> None:
    prepared = prepare(suite.get("mlp-tiny"), StepSettings())
    names = captured(prepared)
    times = profile_op_times(prepared, names, steps=3)
    assert times.steps == 3
    assert {n for n, t in zip(names, times.times_s, strict=True) if t is None} <= MODE_ONLY
    assert all(t is None or t >= 0 for t in times.times_s)
    assert times.unattributed_s >= 0


def test_a_failing_step_is_a_workload_error_and_stops_the_profiler() -> None:
    base = suite.get("mlp-tiny")
    calls = {"n": 0}

    def loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] > 1:  # prepare's check passes, the profiled step fails
            raise ValueError("boom")
        return base.loss(model, batch)

    prepared = prepare(dataclasses.replace(base, loss=loss), StepSettings())
    with pytest.raises(WorkloadError, match="boom"):
        profile_op_times(prepared, ["aten::mm"])
    assert not torch._C._autograd._profiler_enabled()


def test_steps_must_be_positive() -> None:
    prepared = prepare(suite.get("mlp-tiny"), StepSettings())
    with pytest.raises(ValueError, match="steps"):
        profile_op_times(prepared, [], steps=0)


def test_op_times_checks_its_counts() -> None:
    with pytest.raises(ValueError, match="matched"):
        OpTimes(
            times_s=(1e-3, None),
            profiled_step_s=2e-3,
            attributed_s=1e-3,
            unattributed_s=1e-3,
            matched=2,
            steps=1,
            device_time=False,
        )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_times_are_kernel_times() -> None:
    prepared = prepare(suite.get("mlp-tiny"), StepSettings(device=Device.CUDA))
    names = captured(prepared)
    times = profile_op_times(prepared, names)
    assert times.device_time
    by_name: dict[str, list[float]] = {}
    for name, t in zip(names, times.times_s, strict=True):
        if t is not None:
            by_name.setdefault(name, []).append(t)
    assert {n for n, t in zip(names, times.times_s, strict=True) if t is None} <= MODE_ONLY
    # Matmuls launch kernels; views launch none, so their kernel time is exactly zero.
    assert all(t > 0 for t in by_name["aten::addmm"] + by_name["aten::mm"])
    assert all(t == 0 for t in by_name["aten::t"])
    # One stream runs one kernel at a time: kernel times fit in the synchronised step.
    assert times.attributed_s <= times.profiled_step_s
    assert times.attributed_s + times.unattributed_s == times.profiled_step_s


def test_a_device_s_step_is_the_one_timed_without_the_profiler() -> None:
    # An H200's BERT-base step in bf16: 43.5 ms under the profiler, 19.3 ms timed, 15.3 ms
    # of kernels either way; the time outside ops is the timed step's, not the profiler's.
    kernels = OpTimes(
        times_s=(0.0053, 0.01),
        profiled_step_s=0.0435,
        attributed_s=0.0153,
        unattributed_s=0.0282,
        matched=2,
        steps=3,
        device_time=True,
    )
    timed = at_timed_step(kernels, 0.0193)
    assert timed.profiled_step_s == 0.0193
    assert timed.unattributed_s == pytest.approx(0.004)
    assert timed.times_s == kernels.times_s and timed.attributed_s == kernels.attributed_s
    # Never below the kernels' own time; a CPU's times are the host's, left as profiled.
    assert at_timed_step(kernels, 0.01).unattributed_s == 0.0
    on_cpu = dataclasses.replace(kernels, device_time=False)
    assert at_timed_step(on_cpu, 0.0193) is on_cpu
