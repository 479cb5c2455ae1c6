"""SoL ≤ measured on real steps: the tiny suite workloads against this CPU's calibration.

Hand-built profiles test the arithmetic (tests/analysis); this tests the ceilings: a
real calibration of the machine the tests run on, then real per-op times. An op may
read at most `ABOVE_SOL_TOLERANCE` above its speed of light (timing noise between the
calibration and the profile); the step never.
"""

from __future__ import annotations

import dataclasses

import pytest

import lightspeed
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.hardware.calibrate import calibrate, default_plan
from lightspeed.rules import ABOVE_SOL_TOLERANCE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def this_cpu() -> Hardware:
    """This machine's CPU, calibrated with the plan `lightspeed hw calibrate` uses at the
    one precision these workloads run in (every kernel, size and cache level of fp32;
    the other precisions' matrix products would take as long again), and main memory
    read best of 3 rather than 10 times: the largest op of these workloads moves 6 MiB,
    inside the last-level cache, so main memory's roof bounds none of them, and its
    arrays (four times that cache: 1.2 GB on a 300 MB one) took 7 s of the 25."""
    plan = dataclasses.replace(
        default_plan(Device.CPU), precisions=(Precision.FP32,), stream_repeats=3
    )
    return calibrate(Device.CPU, plan)


@pytest.mark.parametrize(
    "workload", ["mlp-tiny", "gpt2-tiny", "resnet18-tiny", "transformer-encoder-tiny"]
)
def test_no_op_and_no_step_beats_its_speed_of_light(this_cpu: Hardware, workload: str) -> None:
    analysis = lightspeed.analyse(lightspeed.profile(workload, hardware=this_cpu, budget_s=0.5))
    timed = [a for a in analysis.ops if a.efficiency is not None]
    assert len(timed) == len([a for a in analysis.ops if a.point is not None])
    worst = max(timed, key=lambda a: a.efficiency or 0.0)
    assert (worst.efficiency or 0.0) <= 1 + ABOVE_SOL_TOLERANCE, (
        f"{worst.op.name} in {worst.op.module!r} ({worst.op.bytes} B, {worst.op.flops} FLOP)"
        f" took {worst.time_s} s against a speed of light of {worst.sol_time_s} s"
    )
    for phase, agg in analysis.phases.items():
        assert agg.sol_time_s <= agg.time_s, phase
    assert analysis.totals.efficiency is not None and analysis.totals.efficiency <= 1
    assert "above-speed-of-light" not in {f.kind for f in analysis.findings}
