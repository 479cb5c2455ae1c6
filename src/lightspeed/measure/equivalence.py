"""Whether a transformed workload still trains the model it trained: the checks an
optimization must pass before its gain counts.

- `gradients_match`: both workloads built from one seed, one step each on the same
  batch; every parameter's gradient compared — bit for bit (a tolerance of 0: what
  checkpointing and lossless encodings promise), or by relative norm
  ‖g′ − g‖ / ‖g‖ within a tolerance (a precision's rounding).
- `loss_curves_match`: mixed precision changes every rounding, so its gradients differ
  from the start and a one-step check says little about training. Both workloads train
  `steps` steps from one seed; the changed curve may differ from the original one by no
  more than the original differs from itself across seeds — the seed-to-seed spread
  of the loss, measured over the same steps (each step's range over the seeds, the
  largest over steps), not a tolerance chosen in advance.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lightspeed.errors import ConfigError
from lightspeed.facts.tuning import Equivalence
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.workload import Workload

# Steps and seeds of a loss-curve check.
CURVE_STEPS = 20
CURVE_SEEDS = (0, 1, 2)


def gradients_match(
    original: Workload,
    changed: Workload,
    settings: StepSettings | None = None,
    *,
    tolerance: float = 0.0,
    seed: int = 0,
) -> Equivalence:
    """Every parameter's gradient after one step of `changed` against `original`'s, both
    built from `seed` (see the module's docstring). Raises ConfigError when the two
    models' parameters differ in names or shapes."""
    settings = settings or StepSettings()
    ours, theirs = _stepped(changed, settings, seed), _stepped(original, settings, seed)
    mine = dict(ours.model.named_parameters())
    reference = dict(theirs.model.named_parameters())
    if list(mine) != list(reference) or any(mine[n].shape != reference[n].shape for n in reference):
        raise ConfigError(
            f"{changed.name!r} and {original.name!r} have different parameters: a"
            " transform must keep the model's parameters to be checked against it."
        )
    worst, error = "", 0.0
    for name, param in reference.items():
        got, want = mine[name].grad, param.grad
        if got is None or want is None:
            if (got is None) != (want is None):
                return Equivalence(
                    check="gradients after one step",
                    passed=False,
                    error=float("inf"),
                    tolerance=tolerance,
                    worst=name,
                )
            continue
        difference = _difference(got, want, exact=tolerance == 0.0)
        if difference > error:
            worst, error = name, difference
    return Equivalence(
        check="gradients after one step" + (", bit for bit" if tolerance == 0.0 else ""),
        passed=error <= tolerance,
        error=error,
        tolerance=tolerance,
        worst=worst,
    )


def loss_curve(
    workload: Workload,
    settings: StepSettings | None = None,
    *,
    steps: int = CURVE_STEPS,
    seed: int = 0,
) -> list[float]:
    """The loss of each of `steps` training steps of `workload` built from `seed`."""
    prepared = _built(workload, settings or StepSettings(), seed)
    return [float(prepared.step().detach().float()) for _ in range(steps)]


def loss_curves_match(
    original: Workload,
    changed: Workload,
    settings: StepSettings | None = None,
    *,
    steps: int = CURVE_STEPS,
    seeds: Sequence[int] = CURVE_SEEDS,
) -> Equivalence:
    """`changed`'s loss curve against `original`'s, from the first of `seeds`, within
    `original`'s seed-to-seed spread over `seeds` (see the module's docstring)."""
    if len(seeds) < 2:
        raise ConfigError("a loss-curve check needs two seeds or more to measure a spread.")
    curves = [loss_curve(original, settings, steps=steps, seed=s) for s in seeds]
    spread = max(max(at) - min(at) for at in zip(*curves, strict=True))
    ours = loss_curve(changed, settings, steps=steps, seed=seeds[0])
    gaps = [abs(a - b) for a, b in zip(ours, curves[0], strict=True)]
    worst = max(range(steps), key=gaps.__getitem__)
    return Equivalence(
        check=f"loss over {steps} steps, within the spread over {len(seeds)} seeds",
        passed=gaps[worst] <= spread,
        error=gaps[worst],
        tolerance=spread,
        worst=f"step {worst + 1}",
    )


def _built(workload: Workload, settings: StepSettings, seed: int) -> PreparedStep:
    torch.manual_seed(seed)
    prepared = prepare(workload, settings)
    torch.manual_seed(seed)  # the step's own randomness (dropout) alike in both
    return prepared


def _stepped(workload: Workload, settings: StepSettings, seed: int) -> PreparedStep:
    prepared = _built(workload, settings, seed)
    prepared.step()
    return prepared


def _difference(got: torch.Tensor, want: torch.Tensor, *, exact: bool) -> float:
    """0 for equal tensors; else ‖got − want‖ / ‖want‖ (inf where `want` is zero), or,
    for an exact check, at least the smallest positive float."""
    if torch.equal(got, want):
        return 0.0
    delta = (got.double() - want.double()).norm()
    norm = want.double().norm()
    relative = float(delta / norm) if norm > 0 else float("inf")
    return max(relative, torch.finfo(torch.float64).tiny) if exact else relative
