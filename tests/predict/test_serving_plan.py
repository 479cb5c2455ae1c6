"""Serving plans under a latency SLO (Nexus's saturated GPUs and squishy bin packing),
checked by their deterministic simulation."""

from __future__ import annotations

import pytest

from lightspeed.facts.serving import BatchLatency, LatencyProfile
from lightspeed.predict.serving import (
    Session,
    largest_batch,
    latency_at,
    one_model_per_gpu,
    plan,
    simulate,
)


def linear(name: str, fixed_s: float, per_sample_s: float) -> LatencyProfile:
    """ℓ(b) = fixed + per-sample × b, timed at 1, 2, 4, …, 64 (an overhead-bound model
    when the fixed part dominates)."""
    batches = tuple(
        BatchLatency(batch_size=b, latencies_s=(fixed_s + per_sample_s * b,), flops=1, bytes=1)
        for b in (1, 2, 4, 8, 16, 32, 64)
    )
    return LatencyProfile(
        name=name, target=None, device="cpu", hardware_id="cpu", threads=1, batches=batches
    )


def test_latency_is_interpolated_between_and_beyond_the_batches_timed() -> None:
    profile = linear("m", 0.010, 0.001)
    assert latency_at(profile, 3) == pytest.approx(0.013)  # between 2 and 4
    assert latency_at(profile, 100) == pytest.approx(0.110)  # along 32 → 64
    # back to back: 2 ℓ(b) ≤ 0.1 s → 10 ms + b ms ≤ 50 ms → b ≤ 40
    assert largest_batch(profile, 0.1) == 40
    assert largest_batch(profile, 0.02) is None  # 10 ms and its wait exceed 20 ms


SMALL = [
    Session(name=n, latency=linear(n, 0.005, 0.0005), rate_per_s=r, slo_s=0.1)
    for n, r in (("a", 20.0), ("b", 30.0), ("c", 10.0))
]
BUSY = [Session(name="big", latency=linear("big", 0.010, 0.0005), rate_per_s=900.0, slo_s=0.1)]
MIXED = [
    Session(name="a", latency=linear("a", 0.010, 0.001), rate_per_s=1_500.0, slo_s=0.1),
    Session(name="b", latency=linear("b", 0.004, 0.0002), rate_per_s=50.0, slo_s=0.05),
    Session(name="c", latency=linear("c", 0.020, 0.002), rate_per_s=5.0, slo_s=0.2),
]


@pytest.mark.parametrize("sessions", [SMALL, BUSY, MIXED], ids=["small", "busy", "mixed"])
def test_a_plan_needs_no_more_gpus_than_batch_one_and_meets_every_slo(
    sessions: list[Session],
) -> None:
    served = plan(sessions)
    assert not served.unservable
    assert len(served.gpus) <= one_model_per_gpu(sessions)
    for gpu in served.gpus:  # room is left for bursts
        if gpu.saturated:
            (share,) = gpu.shares
            assert share.rate_per_s < share.batch_size / share.latency_s
        else:
            assert gpu.occupancy <= 0.9 + 1e-9
    for outcome in simulate(served, sessions, duration_s=30, seed=1):
        assert outcome.requests > 0 and outcome.fraction_within >= 0.99, outcome


def test_small_sessions_share_one_gpu() -> None:
    served = plan(SMALL)
    assert len(served.gpus) == 1 < one_model_per_gpu(SMALL) == 3
    assert {s.session for s in served.gpus[0].shares} == {"a", "b", "c"}


def test_a_busy_session_fills_whole_gpus_first() -> None:
    served = plan(MIXED)
    saturated = [g for g in served.gpus if g.saturated]
    # a runs batches of 40 in 50 ms; arrivals reach 40 in 1 % of batches at λ = 27.75
    # (27.75 + 2.326 × √27.75 = 40), 555 requests a second: 1,500 fill two GPUs
    assert len(saturated) == 2 and all(g.shares[0].batch_size == 40 for g in saturated)
    assert saturated[0].shares[0].rate_per_s == pytest.approx(555, rel=0.01)


def test_a_session_its_slo_cannot_hold_is_named() -> None:
    tight = Session(name="slow", latency=linear("slow", 0.030, 0.001), rate_per_s=1.0, slo_s=0.05)
    served = plan([tight, *SMALL])
    assert served.unservable == ("slow",)


def test_the_simulation_is_deterministic() -> None:
    served = plan(MIXED)
    assert simulate(served, MIXED, duration_s=5, seed=3) == simulate(
        served, MIXED, duration_s=5, seed=3
    )
