"""SoL ≤ measured on real steps: the tiny suite workloads against this CPU's calibration.

Hand-built profiles test the arithmetic (tests/analysis); this tests the ceilings: a
real calibration of the machine the tests run on, then real per-op times. An op may
read at most `ABOVE_SOL_TOLERANCE` above its speed of light (timing noise between the
calibration and the profile); the step never.
"""

from __future__ import annotations

import pytest

import lightspeed
from lightspeed.facts.hardware import Hardware
from lightspeed.rules import ABOVE_SOL_TOLERANCE

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "workload", ["mlp-tiny", "gpt2-tiny", "resnet18-tiny", "transformer-encoder-tiny"]
)
def test_no_op_and_no_step_beats_its_speed_of_light(measured_cpu: Hardware, workload: str) -> None:
    analysis = lightspeed.analyse(lightspeed.profile(workload, hardware=measured_cpu, budget_s=0.5))
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
