"""`analyse(profile)`: the one entry point from a Profile to everything reported about it."""

from __future__ import annotations

import dataclasses

from lightspeed.analysis.diagnosis import diagnose_profile
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
from lightspeed.rules import Bound, Finding


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProfileAnalysis:
    """A Profile's ops on the roofline, its totals by step, phase and module, and its
    diagnosis: the bound and the findings, the largest possible gain first."""

    profile: Profile
    ops: list[OpAnalysis]
    totals: StepTotals
    phases: dict[Phase, Aggregate]
    modules: dict[str, Aggregate]
    findings: list[Finding]
    bound: Bound

    def top(self, n: int) -> list[OpAnalysis]:
        """The n ops with the most headroom."""
        return top_headroom(self.ops, n)


def analyse(profile: Profile) -> ProfileAnalysis:
    """Analyse `profile` on its own hardware."""
    ops = analyse_ops(profile)
    totals = step_totals(profile, ops)
    diagnosis = diagnose_profile(profile, ops, totals)
    return ProfileAnalysis(
        profile=profile,
        ops=ops,
        totals=totals,
        phases=by_phase(ops),
        modules=by_module(ops),
        findings=diagnosis.findings,
        bound=diagnosis.bound,
    )
