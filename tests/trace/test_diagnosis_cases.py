"""One answer per step: on traces where an earlier diagnosis contradicted its own
evidence, the bound now agrees with it and with the first finding, and no finding
contradicts the bound."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from trace_paths import SHARED_TRACES, trace

import lightspeed
from lightspeed.rules import Bound, FindingKind
from lightspeed.trace import analyse_rank, load_trace
from lightspeed.trace.analysis import WindowAnalysis
from lightspeed.trace.idle_causes import IDLE_CAUSES

needs_shared = pytest.mark.skipif(
    not SHARED_TRACES.is_dir(), reason="LIGHTSPEED_SHARED_TRACES names no directory"
)


def _agrees(w: WindowAnalysis, bound: Bound, first: FindingKind) -> None:
    assert w.bound is bound
    assert w.findings[0].kind is first
    if bound not in (Bound.COMPUTE, Bound.MEMORY):
        assert FindingKind.DEVICE_BUSY not in {f.kind for f in w.findings}


def test_a_cpu_step_inside_gloo_all_reduces_is_communication_bound() -> None:
    """hta-cpu-only-rank34: a 210 ms step covered by `gloo:all_reduce` spans."""
    rank = analyse_rank(load_trace(trace("hta-cpu-only-rank34")))
    (step,) = rank.steps
    _agrees(step, Bound.COMMUNICATION, FindingKind.COMMUNICATION)
    assert step.host.collective_s / step.host.window_s > 0.8
    assert FindingKind.HOST_OVERHEAD not in {f.kind for f in step.findings}


@needs_shared
def test_communication_bound_steps_say_nothing_of_faster_kernels() -> None:
    """tracelens-mi300-resnet-checkpointed-train: bound by communication, which the
    earlier report followed with "gains now come from faster kernels"."""
    rank = analyse_rank(
        load_trace(SHARED_TRACES / "tracelens-mi300-resnet-checkpointed-train.json.gz")
    )
    for w in [rank.whole, *rank.steps]:
        _agrees(w, Bound.COMMUNICATION, FindingKind.COMMUNICATION)
    # Its device lags the host by a step: the steps, 118.8 ms when each was taken from
    # its own first to last device event, now fit in the trace's 87.0 ms span.
    assert sum(w.step_s for w in rank.steps) <= 87.0e-3


@needs_shared
def test_idle_spent_in_blocking_copies_is_synchronization() -> None:
    """hta-a100-80gb-recsys-train-rank0of16: the device idles 69 % of its span, the
    host blocked in cudaMemcpyAsync calls for most of it; it was called launch
    overhead while its own finding said the device waits for the host 1 % of the step."""
    rank = analyse_rank(load_trace(SHARED_TRACES / "hta-a100-80gb-recsys-train-rank0of16.json.gz"))
    for w in [rank.whole, *rank.steps]:
        _agrees(w, Bound.SYNCHRONIZATION, FindingKind.SYNCHRONIZATION)
        causes = dataclasses.asdict(w[IDLE_CAUSES])
        for total in ("idle_s", "host_wait_s", "edges_s"):  # wholes, and parts of parts
            del causes[total]
        # Blocking copy calls, or in the last step a device sync that waits out the lagging
        # device, are the largest part of the idle time in every window.
        assert max(causes, key=lambda k: causes[k]) in {"in_copy_calls_s", "in_sync_s"}
        assert w.findings[0].evidence["blocking_copy_s"] == causes["in_copy_calls_s"]
    assert rank.whole[IDLE_CAUSES].in_copy_calls_s > 0.6 * rank.whole.temporal.idle_s


def test_observing_two_batches_names_no_bound() -> None:
    """A 2-batch loop under the default schedule (wait 1, warm-up 1, active 3) records
    a sliver of a step with no op in it: too little to judge, and it says so."""
    x = torch.randn(16, 16)
    with lightspeed.observe() as obs:
        for batch in obs.loop([x, x]):
            (batch @ batch).sum()
    assert obs.bound is Bound.UNKNOWN
    assert [f.kind for f in obs.findings] == [FindingKind.NOTHING_TO_JUDGE]
