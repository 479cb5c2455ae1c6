"""Two bench runs compared workload by workload: `compare_runs(a, b)`.

A workload's change is b's step time over a's. It is a regression only when it is
slower by more than the threshold *and* by more than the noise between rounds, the
larger of the two runs' round spreads (`BenchResult.round_spread`): within one
timing's IQR, drift between minutes goes unseen, and a 1.5x drift would read as a
regression. Faster by as much is an improvement; anything else is unchanged. A change
beyond both, where either run's noise check failed for that workload (a busy machine,
stolen CPU time, a canary that moved: `BenchResult.noise_warnings`), is not judged: a
loaded machine makes the same code 2x slower, so it says which run was noisy and can
never fail a check. Runs from different machines or thread counts are compared with a
warning, and their changes can never fail a check.

The inputs are bench JSON documents (a saved `--json`, or a run the store kept), so a
comparison needs neither torch nor the code that measured them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from lightspeed.facts.bench import round_noise_warnings
from lightspeed.facts.timing import NoiseCheck

DEFAULT_THRESHOLD = 0.05


class Verdict(str, enum.Enum):
    """What a workload's change is."""

    REGRESSION = "slower"
    IMPROVEMENT = "faster"
    UNCHANGED = "unchanged"
    MISSING = "missing"  # in one run only, or failed in one
    NOT_JUDGED = "not judged"  # beyond the bar, but a run's noise check failed


@dataclasses.dataclass(frozen=True, kw_only=True)
class Change:
    """One workload in two runs: step times in seconds, b over a, the noise between
    rounds it is judged against (a fraction), the verdict, and what each run's noise
    checks said of it (empty: quiet, or not checked)."""

    workload: str
    a_step_s: float | None
    b_step_s: float | None
    ratio: float | None
    noise: float | None
    verdict: Verdict
    a_noise: tuple[str, ...] = ()
    b_noise: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Comparison:
    """Every workload of two runs, the threshold used, and why the runs may not be
    comparable (`warnings`; a comparison with any cannot fail a check)."""

    changes: tuple[Change, ...]
    threshold: float
    warnings: tuple[str, ...]

    @property
    def regressions(self) -> tuple[Change, ...]:
        """The workloads that got slower beyond threshold and noise."""
        return tuple(c for c in self.changes if c.verdict is Verdict.REGRESSION)

    @property
    def not_judged(self) -> tuple[Change, ...]:
        """The workloads that changed beyond threshold and noise in a noisy run."""
        return tuple(c for c in self.changes if c.verdict is Verdict.NOT_JUDGED)

    @property
    def fails(self) -> bool:
        """Whether a check should fail: a regression between comparable runs."""
        return bool(self.regressions) and not self.warnings


def compare_runs(
    a: Mapping[str, Any], b: Mapping[str, Any], threshold: float = DEFAULT_THRESHOLD
) -> Comparison:
    """Run `b` against run `a` (bench JSON documents), workload by workload, in a's
    order then b's new ones."""
    first, second = _results(a), _results(b)
    names = list(dict.fromkeys([*first, *second]))
    changes = tuple(_change(n, first.get(n), second.get(n), threshold) for n in names)
    return Comparison(changes=changes, threshold=threshold, warnings=_incomparable(a, b))


def _results(document: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {r["workload"]["name"]: r for r in document.get("results", [])}


def _change(
    name: str, a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, threshold: float
) -> Change:
    a_step = _step(a)
    b_step = _step(b)
    a_noise, b_noise = noise_warnings(a), noise_warnings(b)
    if a_step is None or b_step is None:
        return Change(
            workload=name,
            a_step_s=a_step,
            b_step_s=b_step,
            ratio=None,
            noise=None,
            verdict=Verdict.MISSING,
            a_noise=a_noise,
            b_noise=b_noise,
        )
    assert a is not None and b is not None
    spreads = [s for s in (a.get("round_spread"), b.get("round_spread")) if s is not None]
    noise = max(spreads, default=0.0)
    ratio = b_step / a_step
    bar = max(threshold, noise)
    if ratio - 1 > bar:
        verdict = Verdict.REGRESSION
    elif 1 - ratio > bar:
        verdict = Verdict.IMPROVEMENT
    else:
        verdict = Verdict.UNCHANGED
    if verdict is not Verdict.UNCHANGED and (a_noise or b_noise):
        verdict = Verdict.NOT_JUDGED
    return Change(
        workload=name,
        a_step_s=a_step,
        b_step_s=b_step,
        ratio=ratio,
        noise=noise,
        verdict=verdict,
        a_noise=a_noise,
        b_noise=b_noise,
    )


def noise_warnings(result: Mapping[str, Any] | None) -> tuple[str, ...]:
    """What the noise checks of a bench JSON result's rounds said ("round N: …"): its
    `noise_warnings`, or, in a file written before bench results kept them, read from each
    round's noise check by the same rule."""
    if result is None:
        return ()
    if "noise_warnings" in result:
        return tuple(result["noise_warnings"] or ())
    known = {f.name for f in dataclasses.fields(NoiseCheck)}
    checks = [
        None
        if not (r or {}).get("noise")
        else NoiseCheck(**{k: v for k, v in r["noise"].items() if k in known})
        for r in result.get("rounds") or ()
    ]
    return round_noise_warnings(checks)


def _step(result: Mapping[str, Any] | None) -> float | None:
    if result is None or result.get("failure"):
        return None
    step = result.get("step_s")
    return float(step) if step else None


def _incomparable(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[str, ...]:
    found = []
    machines = [(d.get("hardware") or {}).get("name") for d in (a, b)]
    if machines[0] != machines[1]:
        found.append(f"the runs are from different machines ({machines[0]}, {machines[1]})")
    threads = [d.get("threads") for d in (a, b)]
    if threads[0] != threads[1]:
        found.append(f"the runs used different thread counts ({threads[0]}, {threads[1]})")
    settings = [(d.get("size"), _device_and_dtype(d)) for d in (a, b)]
    if settings[0] != settings[1]:
        found.append("the runs used different sizes, devices or precisions")
    return tuple(found)


def _device_and_dtype(document: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(
        (r["workload"].get("device"), r["workload"].get("dtype"))
        for r in document.get("results", [])[:1]
    )
