"""One set of rules for the profile and the trace: the same step, described by either,
gets the same bound and the same findings; thresholds and precedence by hand."""

from __future__ import annotations

import dataclasses

import pytest

from lightspeed.analysis.profile_analysis import analyse
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import DeviceKind, Hardware
from lightspeed.facts.profile import OpTimeSource, Profile
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.facts.timing import WorkloadInfo, measurement_from_times
from lightspeed.rules import (
    HOST_OVERHEAD_SHARE,
    SMALL_OP_S,
    Bound,
    FindingKind,
    StepFacts,
    aligned_batch_sizes,
    diagnose,
    max_speedup,
    op_bound,
    unaligned_dims,
)
from lightspeed.trace.breakdown import IdleBreakdown, Overlap, TemporalBreakdown
from lightspeed.trace.diagnosis import WindowFacts, diagnose_window
from lightspeed.trace.host import HostStats, LaunchStats

MS = 1e-3
# 1 GFLOP/s and 1 GB/s: an op of F FLOPs and B bytes has a speed of light of
# max(F, B) ns, so the ops below sit where their numbers say.
HW = Hardware(
    id="hand",
    name="hand-made device",
    kind=DeviceKind.GPU,
    peak_flops_per_s={Precision.FP32: 1e9},
    memory_bandwidth_bytes_per_s=1e9,
)


def _op(index: int, name: str, flops: int, nbytes: int, time_s: float) -> OpRecord:
    return OpRecord(
        index=index,
        name=name,
        module="m",
        phase=Phase.FORWARD,
        input_shapes=(),
        input_dtypes=(),
        output_shapes=(),
        output_dtypes=(),
        flops=flops,
        macs=None,
        bytes_read=nbytes,
        bytes_written=0,
        time_s=time_s,
    )


def _profile(device: Device, compute_s: float, memory_s: float, outside_s: float) -> Profile:
    """A step of `compute_s` in a compute-bound op, `memory_s` in a memory-bound one and
    `outside_s` outside any op. Each op runs at its speed of light."""
    ops = (
        _op(0, "aten::mm", int(compute_s * 1e9), 1, compute_s),
        _op(1, "aten::add", 1, int(memory_s * 1e9), memory_s),
    )
    step_s = compute_s + memory_s + outside_s
    return Profile(
        workload=WorkloadInfo(
            name="hand",
            batch_size=1,
            device=device,
            precision=Precision.FP32,
            parameter_count=1,
        ),
        hardware=HW,
        timing=measurement_from_times([step_s] * 5),
        ops=ops,
        op_time_source=OpTimeSource.CUDA_KERNELS if device is Device.CUDA else OpTimeSource.CPU,
        profiled_step_s=step_s,
        unattributed_s=outside_s,
    )


def _host(window_s: float, busy_s: float, ops: int = 2) -> HostStats:
    return HostStats(
        window_s=window_s,
        data_loading_s=0.0,
        sync_s=0.0,
        syncs=0,
        ops=ops,
        work_s=busy_s,
        busy_s=busy_s,
        sync_lost_s=0.0,
    )


def _window(device: bool, compute_s: float, memory_s: float, outside_s: float) -> WindowFacts:
    """The same step seen in a trace: with a device, kernels of `compute_s` and copies
    of `memory_s` with `outside_s` of idle between them; without one, CPU ops."""
    step_s = compute_s + memory_s + outside_s
    if not device:
        return WindowFacts(
            temporal=TemporalBreakdown(),
            idle=IdleBreakdown(),
            overlap=Overlap(),
            launches=LaunchStats(),
            host=_host(step_s, compute_s + memory_s),
        )
    return WindowFacts(
        temporal=TemporalBreakdown(
            compute_s=compute_s, memory_s=memory_s, idle_s=outside_s, total_s=step_s
        ),
        idle=IdleBreakdown(host_wait_s=outside_s),
        overlap=Overlap(),
        launches=LaunchStats(),
        host=_host(step_s, step_s),
    )


CASES = [
    # (device, compute ms, memory ms, outside ms, bound, finding kinds)
    (False, 0.3, 0.1, 0.6, Bound.OVERHEAD, {FindingKind.HOST_OVERHEAD}),
    (False, 0.4, 0.2, 0.4, Bound.COMPUTE, set()),
    (True, 0.5, 0.2, 0.3, Bound.OVERHEAD, {FindingKind.DEVICE_IDLE}),
    (True, 0.3, 0.6, 0.1, Bound.MEMORY, {FindingKind.DEVICE_BUSY}),
    (True, 0.7, 0.2, 0.1, Bound.COMPUTE, {FindingKind.DEVICE_BUSY}),
]


@pytest.mark.parametrize(("device", "compute", "memory", "outside", "bound", "kinds"), CASES)
def test_the_profile_and_the_trace_of_one_step_agree(
    device: bool, compute: float, memory: float, outside: float, bound: Bound, kinds: set
) -> None:
    profile = analyse(
        _profile(
            Device.CUDA if device else Device.CPU, *(x * MS for x in (compute, memory, outside))
        )
    )
    window = diagnose_window(_window(device, compute * MS, memory * MS, outside * MS))
    assert profile.bound is window.bound is bound
    shared = [f for f in profile.findings if f.kind is not FindingKind.SPEED_OF_LIGHT]
    assert {f.kind for f in shared} == {f.kind for f in window.findings} == kinds
    for mine, theirs in zip(shared, window.findings, strict=True):
        assert mine.max_speedup == pytest.approx(theirs.max_speedup)


def test_host_overhead_share_and_its_bound() -> None:
    # 0.6 of a 1 ms step outside ops: at most 1 / (1 − 0.6) = 2.5× faster.
    profile = analyse(_profile(Device.CPU, 0.3 * MS, 0.1 * MS, 0.6 * MS))
    (finding,) = [f for f in profile.findings if f.kind is FindingKind.HOST_OVERHEAD]
    assert finding.max_speedup == pytest.approx(2.5)
    assert finding.evidence["outside_ops_s"] == pytest.approx(0.6 * MS)
    assert finding.evidence["in_small_ops_s"] == 0.0
    # Just under the share, nothing is said and the work decides.
    below = analyse(_profile(Device.CPU, 0.3 * MS, 0.21 * MS, 0.49 * MS))
    assert HOST_OVERHEAD_SHARE == 0.5
    assert below.bound is Bound.COMPUTE
    assert FindingKind.HOST_OVERHEAD not in {f.kind for f in below.findings}


def test_the_bound_is_the_first_cause_and_its_finding_comes_first() -> None:
    # Data loading 30 %, syncs 40 % of the step: both found; the bound is the first
    # cause looked for, data loading, and its finding leads; the rest by their gain.
    facts = StepFacts(
        step_s=1.0, device=False, ops=50, busy_s=1.0, data_loading_s=0.3, sync_cost_s=0.4
    )
    d = diagnose(facts)
    assert d.bound is Bound.DATA_LOADING
    assert [f.kind for f in d.findings] == [FindingKind.DATA_LOADING, FindingKind.SYNCHRONIZATION]
    assert d.findings[1].max_speedup == pytest.approx(1 / 0.6)
    assert diagnose(dataclasses.replace(facts, step_s=0.0)).bound is Bound.UNKNOWN


def test_no_finding_contradicts_the_bound() -> None:
    # A device busy 60 % of the step whose exposed communication takes 30 %: bound by
    # communication, and no "faster kernels" finding beside it.
    facts = StepFacts(
        step_s=1.0, device=True, busy_s=0.6, compute_s=0.6, exposed_communication_s=0.3
    )
    d = diagnose(facts)
    assert d.bound is Bound.COMMUNICATION
    assert [f.kind for f in d.findings] == [FindingKind.COMMUNICATION]
    # Without it the busy device is the story.
    busy = diagnose(dataclasses.replace(facts, exposed_communication_s=0.0))
    assert (busy.bound, busy.findings[0].kind) == (Bound.COMPUTE, FindingKind.DEVICE_BUSY)


def test_a_window_with_nothing_recorded_names_no_bound() -> None:
    # observe() on a loop shorter than its schedule: a 37.5 µs window, no op, no device.
    d = diagnose(StepFacts(step_s=37.5e-6, device=False))
    assert d.bound is Bound.UNKNOWN
    assert [f.kind for f in d.findings] == [FindingKind.NOTHING_TO_JUDGE]
    assert "37.5 µs" in d.findings[0].message


def test_tensor_core_multiples_per_precision() -> None:
    dims = {"M": 20, "K": 12, "N": 64}
    assert unaligned_dims(dims, Precision.TF32) == {}  # 20, 12, 64: multiples of 4
    assert unaligned_dims(dims, Precision.BF16) == {"M": 20, "K": 12}  # not of 8
    assert unaligned_dims(dims, Precision.FP8) == {"M": 20, "K": 12}  # not of 16
    assert unaligned_dims({"M": 48}, Precision.FP8) == {}
    assert unaligned_dims(dims, Precision.FP32) is None  # no tensor cores
    facts = StepFacts(
        step_s=1.0,
        device=True,
        busy_s=1.0,
        compute_s=1.0,
        unaligned_s=0.2,
        unaligned_excess_s=0.1,
        unaligned_precisions=(Precision.TF32, Precision.FP8),
    )
    (finding,) = [f for f in diagnose(facts).findings if f.kind is FindingKind.TENSOR_CORE_SHAPES]
    assert "not a multiple of 16 (FP8) or 4 (TF32)" in finding.message
    assert "multiples of 16" in finding.message
    assert finding.max_speedup == pytest.approx(1 / 0.9)


def test_one_small_op_threshold() -> None:
    # Under SMALL_OP_S and under half its speed of light: overhead; either alone: not.
    assert op_bound(Bound.MEMORY, SMALL_OP_S / 2, 0.4) is Bound.OVERHEAD
    assert op_bound(Bound.MEMORY, SMALL_OP_S * 2, 0.4) is Bound.MEMORY
    assert op_bound(Bound.COMPUTE, SMALL_OP_S / 2, 0.6) is Bound.COMPUTE
    assert max_speedup(0.5) == 2.0 and max_speedup(1.0) == float("inf")


def test_aligned_batch_sizes_put_batch_times_sequence_rows_on_the_multiple() -> None:
    # bf16 (multiple 8), 5 rows a sample: b × 5 is a multiple of 8 for b in 8, 16, …
    assert aligned_batch_sizes(6, 30, Precision.BF16) == (8,)
    assert aligned_batch_sizes(12, 60, Precision.BF16) == (16, 8)
    # 6 rows a sample: b × 6 is a multiple of 8 for b a multiple of 4 (8 / gcd(6, 8)).
    assert aligned_batch_sizes(5, 30, Precision.BF16) == (8, 4)
    # tf32 (multiple 4), one row a sample (an LSTM's timestep): 4 and 8 around 7.
    assert aligned_batch_sizes(7, 7, Precision.TF32) == (8, 4)
    # Rows the batch does not divide, or no tensor cores: nothing to say.
    assert aligned_batch_sizes(4, 30, Precision.BF16) is None
    assert aligned_batch_sizes(6, 30, Precision.FP32) is None
