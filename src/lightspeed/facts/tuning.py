"""What `lightspeed tune` found: each optimization predicted, checked and measured."""

from __future__ import annotations

import dataclasses

from lightspeed.facts.profile import Profile


@dataclasses.dataclass(frozen=True, kw_only=True)
class Equivalence:
    """The outcome of one equivalence check: `check` names what was compared, `passed`
    whether `error` (the largest difference found: relative for gradients, in loss
    units for a loss curve) is within `tolerance`, and `worst` where that difference is
    (a parameter name, or a step)."""

    check: str
    passed: bool
    error: float
    tolerance: float
    worst: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Candidate:
    """One optimization tried: `name` ("amp-bf16", "checkpoint", "gist"), `transform`
    (how it was applied, as `lightspeed.optimize` takes it), the step time in seconds and
    peak memory in bytes predicted before it ran and measured after, its equivalence
    check, and `verdict`: "kept", "faster", "slower", "over budget", "failed check",
    "skipped", or "error". `reason` says why, for the last three.
    `arguments`: what the transform took (the dtype, then module names). `profile`: the
    measured profile (None when it did not run)."""

    name: str
    transform: str = ""
    arguments: tuple[str, ...] = ()
    predicted_step_s: float | None = None
    predicted_peak_bytes: int | None = None
    measured_step_s: float | None = None
    measured_peak_bytes: int | None = None
    equivalence: Equivalence | None = None
    verdict: str = "skipped"
    reason: str = ""
    profile: Profile | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tuning:
    """A tuning run: the plain step's profile (`baseline`), the peak-memory budget in
    bytes it had to meet (None: none), every candidate in the order tried, and the one
    kept (None: none beat the plain step, or none fit)."""

    baseline: Profile
    memory_budget_bytes: int | None
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None
