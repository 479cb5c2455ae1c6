"""`analyse(profile)`: the one entry point from a Profile to everything reported about it."""

from __future__ import annotations

import dataclasses

from lightspeed.analysis.bottleneck_rules import StepBound
from lightspeed.analysis.findings import (
    Finding,
    step_bound,
    step_findings,
    tensor_core_findings,
    time_by_bound,
)
from lightspeed.analysis.step_roofline import (
    Aggregate,
    OpAnalysis,
    StepTotals,
    analyse_ops,
    by_module,
    by_phase,
    step_totals,
    top_headroom,
)
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import Phase


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProfileAnalysis:
    """A Profile's ops on the roofline, its totals by step, phase and module, and findings."""

    profile: Profile
    ops: list[OpAnalysis]
    totals: StepTotals
    phases: dict[Phase, Aggregate]
    modules: dict[str, Aggregate]
    findings: list[Finding]
    bound: StepBound

    def top(self, n: int) -> list[OpAnalysis]:
        """The n ops with the most headroom."""
        return top_headroom(self.ops, n)


def analyse(profile: Profile) -> ProfileAnalysis:
    """Analyse `profile` on its own hardware."""
    ops = analyse_ops(profile)
    totals = step_totals(profile, ops)
    by_bound = time_by_bound(ops)
    findings = step_findings(profile, ops, totals, by_bound)
    findings += tensor_core_findings(ops, profile.hardware, profile.workload.precision)
    return ProfileAnalysis(
        profile=profile,
        ops=ops,
        totals=totals,
        phases=by_phase(ops),
        modules=by_module(ops),
        findings=findings,
        bound=step_bound(profile, by_bound),
    )
