"""N-way data parallel predicted from one process's profile: the ring all-reduce, DDP's
buckets overlapping backward, exact arithmetic on hand-built profiles, and the
catalog's links."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factories import FAKE_CPU
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError, UnknownNameError
from lightspeed.facts.device import Device
from lightspeed.facts.link import Link, link_from_dict, link_to_dict
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import MemoryBreakdown, OpRecord, Phase
from lightspeed.facts.timing import Measurement, WorkloadInfo
from lightspeed.hardware.links import catalog_link, link_ids
from lightspeed.predict.data_parallel import (
    backward_s,
    bucket_sizes,
    communication,
    exposed_communication_s,
    on_data_parallel,
    ring_all_reduce_s,
    scaling_table,
)

MiB = 2**20
MS = 1e-3
# 1 MiB a millisecond each way and no latency: an all-reduce over 2 processes of b MiB
# takes 2·(2−1)/2 · b MiB / (1 MiB/ms) = b ms.
MIB_PER_MS = Link(id="test", name="test link", bandwidth_bytes_per_s=MiB / MS, latency_s=0.0)


def op(index: int, phase: Phase, time_s: float) -> OpRecord:
    return OpRecord(
        index=index,
        name="aten::mm",
        module="layer",
        phase=phase,
        input_shapes=((4, 4),),
        input_dtypes=("float32",),
        output_shapes=((4, 4),),
        output_dtypes=("float32",),
        flops=128,
        macs=64,
        bytes_read=128,
        bytes_written=64,
        time_s=time_s,
    )


def memory(gradients_bytes: int) -> MemoryBreakdown:
    return MemoryBreakdown(
        parameters_bytes=gradients_bytes,
        gradients_bytes=gradients_bytes,
        optimizer_state_bytes=0,
        activations_bytes=0,
        temporaries_bytes=0,
        inputs_bytes=0,
        peak_bytes=2 * gradients_bytes,
        at_peak_bytes={"parameters": gradients_bytes, "gradients": gradients_bytes},
        method="tracked-storages",
    )


def hand_profile(
    *,
    step_s: float,
    forward_s: float,
    backward_s: float,
    optimizer_s: float,
    gradients_bytes: int | None,
    batch: int = 8,
) -> Profile:
    """A step whose ops take the phases' times; the profiled step is their sum."""
    ops = (
        op(0, Phase.FORWARD, forward_s),
        op(1, Phase.BACKWARD, backward_s),
        op(2, Phase.OPTIMIZER, optimizer_s),
    )
    return Profile(
        workload=WorkloadInfo(
            name="hand-built",
            batch_size=batch,
            device=Device.CPU,
            precision=Precision.FP32,
            parameter_count=1000,
        ),
        hardware=FAKE_CPU,
        timing=Measurement(times_s=(step_s, step_s, step_s), steps_per_replicate=1, warmup_steps=1),
        ops=ops,
        memory=None if gradients_bytes is None else memory(gradients_bytes),
        profiled_step_s=forward_s + backward_s + optimizer_s,
        unattributed_s=0.0,
    )


def test_ring_all_reduce_time() -> None:
    link = Link(id="l", name="l", bandwidth_bytes_per_s=1e9, latency_s=1e-5)
    # 2·(4−1)/4 · 8e6 B / 1e9 B/s + 2·(4−1) · 10 µs = 12 ms + 60 µs
    assert ring_all_reduce_s(8e6, 4, link) == pytest.approx(12e-3 + 60e-6)
    assert ring_all_reduce_s(8e6, 1, link) == 0.0


def test_buckets_start_small_then_take_the_cap() -> None:
    # torch's first bucket of 1 MiB, then 25 MiB buckets, the last with the rest.
    assert bucket_sizes(30 * MiB) == (MiB, 25 * MiB, 4 * MiB)
    assert bucket_sizes(MiB // 2) == (MiB // 2,)
    assert bucket_sizes(52 * MiB) == (MiB, 25 * MiB, 25 * MiB, MiB)
    assert bucket_sizes(0) == ()
    with pytest.raises(ConfigError):
        bucket_sizes(MiB, bucket_bytes=0)


def test_backward_is_its_share_of_the_measured_step() -> None:
    p = hand_profile(
        step_s=20 * MS, forward_s=3 * MS, backward_s=6 * MS, optimizer_s=1 * MS, gradients_bytes=MiB
    )
    # 6 ms of a 10 ms profiled step, applied to the 20 ms median step.
    assert backward_s(p) == pytest.approx(12 * MS)


def test_one_process_adds_nothing() -> None:
    p = hand_profile(
        step_s=10 * MS,
        forward_s=3 * MS,
        backward_s=6 * MS,
        optimizer_s=1 * MS,
        gradients_bytes=30 * MiB,
    )
    predicted = on_data_parallel(p, 1, catalog_link("ethernet-10g"))
    assert predicted.step_time_s == p.step_time_s
    assert predicted.timing == p.timing
    assert predicted.prediction is not None
    assert predicted.prediction.changes == {"dp": "1", "link": "ethernet-10g"}


def test_only_the_last_bucket_is_exposed_when_all_reduces_keep_up() -> None:
    # 30 MiB in buckets of 1, 25, 4 MiB, made over a 200 ms backward: ready at 6.67 ms,
    # 173.33 ms and 200 ms; each all-reduce (1, 25, 4 ms) ends before the next is ready
    # (the 25 ms one at 198.33 ms), so only the last, which starts when backward ends,
    # runs past it: 4 ms.
    p = hand_profile(
        step_s=300 * MS,
        forward_s=80 * MS,
        backward_s=200 * MS,
        optimizer_s=20 * MS,
        gradients_bytes=30 * MiB,
    )
    comm = communication(p, 2, MIB_PER_MS)
    assert comm.all_reduce_s == pytest.approx(30 * MS)
    assert comm.exposed_s == pytest.approx(4 * MS)
    assert on_data_parallel(p, 2, MIB_PER_MS).step_time_s == pytest.approx(304 * MS)


def test_exposed_is_communication_less_what_overlaps_backward() -> None:
    # The same buckets over a 10 ms backward: ready at 0.33, 8.67 and 10 ms. The 1 ms
    # all-reduce ends at 1.33; the 25 ms one runs 8.67 → 33.67; the 4 ms one 33.67 →
    # 37.67. Overlapped with backward: 1 ms + (10 − 8.67) ms = 2.33 ms, so
    # exposed = 30 − 2.33 = 27.67 ms = 37.67 − 10.
    p = hand_profile(
        step_s=20 * MS,
        forward_s=6 * MS,
        backward_s=10 * MS,
        optimizer_s=4 * MS,
        gradients_bytes=30 * MiB,
    )
    comm = communication(p, 2, MIB_PER_MS)
    assert comm.backward_s == pytest.approx(10 * MS)
    assert comm.exposed_s == pytest.approx((30 - 1 - (10 - 26 / 3)) * MS)
    assert comm.exposed_s == pytest.approx((37 + 2 / 3 - 10) * MS)
    predicted = on_data_parallel(p, 2, MIB_PER_MS)
    assert predicted.step_time_s == pytest.approx((20 + 27 + 2 / 3) * MS)
    assert predicted.prediction is not None
    assert predicted.prediction.measured_step_time_s == 20 * MS


def test_untimed_ops_expose_all_communication() -> None:
    p = hand_profile(
        step_s=20 * MS,
        forward_s=6 * MS,
        backward_s=10 * MS,
        optimizer_s=4 * MS,
        gradients_bytes=30 * MiB,
    )
    untimed = dataclasses.replace(
        p, ops=tuple(dataclasses.replace(o, time_s=None) for o in p.ops), profiled_step_s=None
    )
    assert communication(untimed, 2, MIB_PER_MS).exposed_s == pytest.approx(30 * MS)


def test_without_memory_the_gradients_are_the_parameters() -> None:
    p = hand_profile(
        step_s=20 * MS,
        forward_s=6 * MS,
        backward_s=10 * MS,
        optimizer_s=4 * MS,
        gradients_bytes=None,
    )
    assert communication(p, 2, MIB_PER_MS).gradient_bytes == 1000 * 4  # fp32 parameters


@given(
    slow=st.floats(min_value=1e6, max_value=1e12),
    factor=st.floats(min_value=1.0, max_value=1e3),
    latency=st.floats(min_value=0.0, max_value=1e-3),
    processes=st.integers(min_value=1, max_value=64),
    backward=st.floats(min_value=0.0, max_value=1.0),
)
def test_a_faster_link_never_slows_the_step(
    slow: float, factor: float, latency: float, processes: int, backward: float
) -> None:
    buckets = bucket_sizes(60 * MiB)
    one = Link(id="a", name="a", bandwidth_bytes_per_s=slow, latency_s=latency)
    faster = dataclasses.replace(one, bandwidth_bytes_per_s=slow * factor)
    lower = dataclasses.replace(one, latency_s=latency / 2)
    base = exposed_communication_s(buckets, backward, processes, one)
    assert exposed_communication_s(buckets, backward, processes, faster) <= base + 1e-12
    assert exposed_communication_s(buckets, backward, processes, lower) <= base + 1e-12
    assert 0.0 <= base <= sum(ring_all_reduce_s(b, processes, one) for b in buckets) + 1e-12


def test_weak_scaling_table() -> None:
    p = hand_profile(
        step_s=20 * MS,
        forward_s=6 * MS,
        backward_s=10 * MS,
        optimizer_s=4 * MS,
        gradients_bytes=30 * MiB,
    )
    one, two = scaling_table(p, [1, 2], MIB_PER_MS)
    assert (one.processes, one.step_time_s, one.efficiency) == (1, 20 * MS, 1.0)
    # 2 · 8 samples in 20 + 27.67 ms, over twice one process's 8 / 20 ms.
    assert two.samples_per_s == pytest.approx(16 / ((47 + 2 / 3) * MS))
    assert two.efficiency == pytest.approx(20 / (47 + 2 / 3))


def test_strong_scaling_table_splits_the_global_batch() -> None:
    def at_batch(batch: int) -> Profile:
        # A step of 1 ms a sample with untimed ops (all communication exposed), 1 MiB of
        # gradients: one 1 ms all-reduce over 2 processes.
        p = hand_profile(
            step_s=batch * MS,
            forward_s=1,
            backward_s=1,
            optimizer_s=1,
            gradients_bytes=MiB,
            batch=batch,
        )
        return dataclasses.replace(p, ops=(), profiled_step_s=None)

    one, two = scaling_table(at_batch, [1, 2], MIB_PER_MS, global_batch=8)
    assert (one.per_device_batch, one.samples_per_s, one.efficiency) == (8, 1000.0, 1.0)
    # 4 samples a process in 4 + 1 ms: 1600 samples/s over 2 × 1000.
    assert two.per_device_batch == 4
    assert two.samples_per_s == pytest.approx(1600.0)
    assert two.efficiency == pytest.approx(0.8)
    with pytest.raises(ConfigError, match="does not split evenly"):
        scaling_table(at_batch, [3], MIB_PER_MS, global_batch=8)
    with pytest.raises(ConfigError, match="callable"):
        scaling_table(at_batch(8), [2], MIB_PER_MS, global_batch=8)


@pytest.mark.parametrize("link_id", link_ids())
def test_catalog_links_have_sources(link_id: str) -> None:
    link = catalog_link(link_id)
    for field in ("bandwidth_bytes_per_s", "latency_s"):
        assert "http" in (link.source_of(field) or ""), f"{link_id}.{field} has no source"
    assert link_from_dict(link_to_dict(link)) == link


def test_catalog_links_are_one_direction() -> None:
    assert {"nvlink4", "nvlink3", "pcie4", "pcie5", "ib-hdr", "ib-ndr"} <= set(link_ids())
    assert {"ethernet-100g", "ethernet-25g", "ethernet-10g"} <= set(link_ids())
    # Datasheets' aggregates halved: H100 NVLink 900 GB/s, A100 600 GB/s; HDR 200 Gb/s.
    assert catalog_link("nvlink4").bandwidth_bytes_per_s == 450e9
    assert catalog_link("nvlink3").bandwidth_bytes_per_s == 300e9
    assert catalog_link("ib-hdr").bandwidth_bytes_per_s == 200e9 / 8
    assert catalog_link("ethernet-100g").bandwidth_bytes_per_s == 100e9 / 8
    assert catalog_link("nvlink") == catalog_link("nvlink4")
    assert "nvlink" not in link_ids()


def test_an_unknown_link_suggests_the_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        catalog_link("nvlnk4")
    assert "'nvlink4'" in str(info.value) and "hw list --links" in str(info.value)


def test_the_corun_slowdown_weighs_each_bound_by_its_time() -> None:
    from factories import HAND_BUILT
    from lightspeed.facts.link import CoRun
    from lightspeed.predict.data_parallel import corun_slowdown

    corun = CoRun(processes=2, compute=2.0, memory=3.0, overhead=1.5)
    # compute-bound 40 ms ×2, memory-bound 20 ms ×3; the overhead-bound op, the view and
    # the 5 ms outside ops ×1.5; the untimed op adds nothing.
    rest = 10e-6 + 5e-6 + 0.005
    expected = (0.040 * 2 + 0.020 * 3 + rest * 1.5) / (0.040 + 0.020 + rest)
    assert corun_slowdown(HAND_BUILT, corun) == pytest.approx(expected)
    assert corun_slowdown(HAND_BUILT, CoRun(processes=2)) == 1.0
