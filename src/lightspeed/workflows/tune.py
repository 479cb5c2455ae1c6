"""`tune(workload, …)`: each optimization of `lightspeed.optimize` predicted, applied,
checked for equivalence and measured, side by side; the best kept.

For each candidate the plain step's profile gives a prediction first (`predict`), then
the transform is applied, its equivalence checked (`measure.equivalence`: gradients bit
for bit for checkpointing and Gist's encodings, which promise it; the loss curve within
the seed-to-seed spread for mixed precision, which changes every rounding), and the
changed step measured through the same timing path as every workload
(`lightspeed.profile`). A candidate that fails its check is reported as failed, never as
a gain. The one kept: with a memory budget, the fastest whose measured peak fits it;
without, the fastest that beats the plain step by more than `MIN_GAIN`.

The candidates:
- `amp`: autocast bf16 (and fp16, with its loss scaler, on a GPU, where fp16 has tensor
  cores; on a CPU it only emulates them);
- `checkpoint`: the modules named (`checkpoint`, as `lightspeed predict --checkpoint`
  takes them: "auto", Chen et al.'s √N segments, or module names, patterns and
  `STACK.I:J` segments), else the planner's plan (`predict.checkpointing`) for the memory
  budget, or, without one, for half the activations the step keeps for backward;
- `gist`: the encodings that free memory in this model (`predict.encodings`);
- and, when mixed precision and checkpointing each passed their check alone, the two
  together (`amp-bf16+checkpoint`), checked by its loss curve;
- `fuse`: for sweep-shaped work (`jobs`: K jobs of this step to run, a sweep's
  trials), the K fused into one step (`optimize.fusion.fuse`), predicted by
  `predict.fusion` and checked by each job's loss fused against alone; its step time is
  a job's share of the fused step, its peak the K jobs'. Where the prediction says
  fusion will not help (a compute-bound step), the row says so;
- `loader`: for a workload with a data loader (`Workload.loader`), its DataLoader
  options tuned against the loop's measured wait for data (`loader_tuning`), reported
  apart: they change the loop, not the step, and what the step computes stays the same.

`tune_code.plan_code` writes the kept candidate as code for the user's own script.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import torch

from lightspeed.errors import ConfigError, LightspeedError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.facts.tuning import (
    Candidate,
    CandidateKind,
    Equivalence,
    PlannedCheckpoint,
    Tuning,
    Verdict,
)
from lightspeed.measure.equivalence import gradients_match, loss_curves_match
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.optimize.checkpoint_plan import (
    checkpoint_plan,
    merges_segments,
    op_level_spec,
    parse_op_level,
)
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.optimize.encodings import gist
from lightspeed.optimize.padding import padding_suggestions
from lightspeed.optimize.precision import autocast
from lightspeed.predict.checkpointing import plan_checkpoint
from lightspeed.predict.encodings import gist_savings
from lightspeed.predict.shapes import settings_of
from lightspeed.predict.whatif import checkpoint_modules, predict
from lightspeed.workflows.loader_tuning import tune_loader
from lightspeed.workflows.profile import profile
from lightspeed.workload import Workload

__all__ = ["CANDIDATES", "MIN_GAIN", "checkpoint_for_budget", "checkpointed_modules", "tune"]

# The kinds `only` may name, in the order they are tried.
CANDIDATES = (
    CandidateKind.AMP,
    CandidateKind.CHECKPOINT,
    CandidateKind.GIST,
    CandidateKind.FUSE,
    CandidateKind.LOADER,
)
# The least speed-up a candidate must show to be kept without a memory budget: less is
# within what this kind of machine drifts between measurements.
MIN_GAIN = 1.03


def tune(
    workload: Workload,
    *,
    memory_budget_bytes: int | None = None,
    only: Sequence[str] | None = None,
    device: str | Device = Device.CPU,
    hardware: Hardware | str | None = None,
    budget_s: float = 0.5,
    jobs: int | None = None,
    checkpoint: str | None = None,
) -> Tuning:
    """Every candidate (`only`: those named, from `CANDIDATES`) for `workload`'s step on
    `device`, placed on `hardware` (as `lightspeed.profile` takes it), each profiled with
    `budget_s` seconds of timing (see the module's docstring). `jobs`: K jobs of this
    step to run (a sweep's trials), which adds fusion. `checkpoint`: the modules the
    checkpoint candidate wraps, as `predict`'s `checkpoint` takes them ("auto", or
    comma-separated names, patterns or STACK.I:J segments; None: the planner's choice),
    refused before anything runs when they name no module. A candidate that cannot run
    says why in its row; the others go on."""
    kinds = _kinds(CANDIDATES if only is None else only, asked=only is not None, jobs=jobs)
    named = None if checkpoint is None else _named(workload, checkpoint, kinds)
    if memory_budget_bytes is not None and memory_budget_bytes < 1:
        raise ConfigError(f"--memory-budget {memory_budget_bytes} must be at least 1 byte.")
    if only is not None and CandidateKind.LOADER in kinds and workload.loader is None:
        raise ConfigError(
            f"--only loader: workload {workload.name!r} has no data loader; give its"
            " Workload a loader (loader=lambda batch_size, **options: DataLoader(dataset,"
            " batch_size, **options)), or leave loader out."
        )
    baseline = profile(workload, device=device, hardware=hardware, budget_s=budget_s)
    loading, loading_error = None, ""
    if CandidateKind.LOADER in kinds and workload.loader is not None:
        try:
            loading = tune_loader(workload, settings_of(baseline))
        except LightspeedError as exc:
            loading_error = str(exc)
    makers: dict[CandidateKind, Callable[[Workload, Profile, int | None], list[_Trial]]] = {
        CandidateKind.AMP: _amp,
        CandidateKind.CHECKPOINT: lambda w, b, budget: _checkpoint(w, b, budget, named, plans),
        CandidateKind.GIST: _gist,
        CandidateKind.FUSE: lambda w, b, _budget: _fuse(w, b, jobs or 2),
    }
    plans: list[PlannedCheckpoint] = []  # the checkpoint planner's options, as weighed
    candidates: list[Candidate] = []
    passed: dict[CandidateKind, Candidate] = {}  # the first equivalent one of each kind
    for kind in kinds:
        if kind not in makers:
            continue  # the loader, tuned above
        try:
            trials = makers[kind](workload, baseline, memory_budget_bytes)
        except LightspeedError as exc:
            candidates.append(
                Candidate(
                    name=kind.value,
                    kind=kind,
                    verdict=Verdict.SKIPPED,
                    reason=_reason(kind.value, exc),
                )
            )
            continue
        for trial in trials:
            found = _run(trial, baseline, device, budget_s, memory_budget_bytes)
            candidates.append(found)
            if found.equivalence is not None and found.equivalence.passed:
                passed.setdefault(found.kind, found)
    combined = _combined(workload, baseline, passed)
    if combined is not None:
        candidates.append(_run(combined, baseline, device, budget_s, memory_budget_bytes))
    tuning = _kept(baseline, memory_budget_bytes, candidates)
    return dataclasses.replace(
        tuning, loading=loading, loading_error=loading_error, checkpoint_plans=tuple(plans)
    )


def _kinds(names: Sequence[str], *, asked: bool, jobs: int | None) -> list[CandidateKind]:
    """The kinds `names` asks for, in its order; fusion only with `jobs`, which without
    them is left out, or refused when `asked` for by `--only`."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 2):
        raise ConfigError(f"--jobs {jobs!r}: fusion needs 2 jobs or more.")
    if asked and CandidateKind.FUSE in names and jobs is None:
        raise ConfigError(
            "--only fuse: say how many jobs of this step there are to fuse (--jobs K, the"
            " trials of a sweep)."
        )
    if jobs is None:
        names = [n for n in names if n != CandidateKind.FUSE]
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        choices = ", ".join(kind.value for kind in CANDIDATES)
        raise ConfigError(f"--only {','.join(unknown)}: not a candidate; choose from {choices}.")
    return [CandidateKind(n) for n in names]


def _named(workload: Workload, text: str, kinds: Sequence[CandidateKind]) -> tuple[str, ...]:
    """The modules `--checkpoint TEXT` names in `workload`'s model, for the checkpoint
    candidate among `kinds`."""
    if CandidateKind.CHECKPOINT not in kinds:
        tried = ",".join(kind.value for kind in kinds)
        raise ConfigError(
            f"--checkpoint {text}: the checkpoint candidate is not tried (--only {tried});"
            " add checkpoint to --only, or leave --checkpoint out."
        )
    return checkpointed_modules(workload, text)


def checkpointed_modules(workload: Workload, text: str) -> tuple[str, ...]:
    """The modules `text` (what `lightspeed predict --checkpoint` takes: "auto", "ops",
    "ops:MODULES" or comma-separated names, patterns and STACK.I:J segments) has
    `optimize.checkpoint` wrap in `workload`'s model, written out: module names,
    `ops:NAME` for a module recomputed op by op (`ops+K:NAME` with K kinds of product
    recomputed too), and STACK.I:J for a run of a
    Sequential's blocks recomputed as one (a model that is itself the Sequential has its
    blocks named one by one), in model order. Raises ConfigError where
    `text` names no module (or `auto` finds no stack of blocks)."""
    model = _module_tree(workload)
    plan = checkpoint_plan(model, checkpoint_modules(text))
    named = dict(model.named_modules())
    found = []
    for segment in plan.segments:
        products = plan.products_of(segment[0])
        if products is not None:
            found.append(op_level_spec(segment[0], products))
            continue
        stack, _, first = segment[0].rpartition(".")
        # STACK.I:J cannot name the model itself (""): its blocks are named one by one.
        if stack and stack in plan.stacks and merges_segments(named[stack]):
            blocks = [child for child, _ in named[stack].named_children()]
            start = blocks.index(first)
            found.append(f"{stack}.{start}:{start + len(segment)}")
        else:
            found.extend(segment)
    return tuple(found)


def _module_tree(workload: Workload) -> torch.nn.Module:
    """`workload`'s model built on the meta device, where only its module tree is wanted
    (no memory); built as it is where it cannot be built there."""
    try:
        with torch.device("meta"):
            return workload.model()
    except Exception:  # a model that needs real data to build is built for real
        return workload.model()


def checkpoint_for_budget(
    workload: Workload,
    budget_bytes: int,
    *,
    device: str | Device = Device.CPU,
    hardware: Hardware | str | None = None,
    budget_s: float = 0.5,
) -> Workload:
    """`workload` with the checkpoint plan whose step's peak memory fits `budget_bytes`
    (bytes) at the least predicted time: the plain step profiled on `device`, the planner
    (`predict.checkpointing.plan_checkpoint`) choosing among each stack's coverings on
    fake tensors, and `optimize.checkpoint` applying it. `workload` itself when its
    measured peak fits already (nothing is planned then); a ConfigError when no plan fits
    or the model has no stack of blocks."""
    if budget_bytes < 1:
        raise ConfigError(f"budget_bytes {budget_bytes} must be at least 1 byte.")
    baseline = profile(workload, device=device, hardware=hardware, budget_s=budget_s)
    if baseline.memory is not None and baseline.memory.peak_bytes <= budget_bytes:
        return workload
    modules = list(plan_checkpoint(baseline, workload, budget_bytes).chosen.modules)
    return checkpoint(workload, modules) if modules else workload


def _fuse(workload: Workload, baseline: Profile, jobs: int) -> list[_Trial]:
    """K jobs of the step fused: predicted from the plain step, checked by each job's
    loss after a few steps fused against the same job alone."""
    from lightspeed.optimize.fusion.fuse import fuse
    from lightspeed.predict.fusion import fusion_verdict, on_fused

    changed = fuse(workload, jobs)
    predicted = on_fused(baseline, jobs)
    made = predicted.prediction
    assert made is not None and made.fusion is not None
    fusion = made.fusion
    step = predicted.step_time_s
    return [
        _Trial(
            name=f"fuse{jobs}",
            kind=CandidateKind.FUSE,
            transform=f"fuse(workload, {jobs})",
            changed=changed,
            predicted_step_s=None if step is None else step / jobs,
            predicted_peak_bytes=_peak(predicted),
            check=lambda: _jobs_match(workload, jobs),
            arguments=(str(jobs),),
            jobs=jobs,
            reason="" if fusion.helps else fusion_verdict(False, fusion.overhead_share, jobs),
        )
    ]


# Steps each fused job and its lone run take before their losses are compared, and the
# relative difference allowed: fused jobs compute what they compute alone, to rounding.
_FUSED_CHECK_STEPS = 3
_FUSED_CHECK_TOLERANCE = 1e-4


def _jobs_match(workload: Workload, jobs: int) -> Equivalence:
    """Each of `jobs` fused jobs' loss after a few steps against the same job alone."""
    from lightspeed.workflows.sweep import run_alone, run_fused

    numbers = list(range(jobs))
    fused = run_fused(workload, [{}] * jobs, numbers, steps=_FUSED_CHECK_STEPS, seed=0)
    worst, error = "", 0.0
    for n, loss in zip(numbers, fused, strict=True):
        alone = run_alone(workload, {}, n, steps=_FUSED_CHECK_STEPS, seed=0)
        if loss is None or alone is None:
            difference = 0.0 if loss is None and alone is None else float("inf")
        else:
            difference = abs(loss - alone) / max(abs(alone), 1e-30)
        if difference >= error:
            worst, error = f"job {n}", difference
    return Equivalence(
        check=f"each job's loss after {_FUSED_CHECK_STEPS} steps, fused against alone",
        passed=error <= _FUSED_CHECK_TOLERANCE,
        error=error,
        tolerance=_FUSED_CHECK_TOLERANCE,
        worst=worst,
    )


def _combined(
    workload: Workload, baseline: Profile, passed: Mapping[CandidateKind, Candidate]
) -> _Trial | None:
    """Mixed precision with the checkpoint plan, when each passed its check alone (the
    first of each kind in `passed`): the memory checkpointing frees at the speed autocast
    gains. None when either did not."""
    amp, plan = passed.get(CandidateKind.AMP), passed.get(CandidateKind.CHECKPOINT)
    if amp is None or plan is None:
        return None
    (dtype,), modules = amp.arguments, list(plan.arguments)
    changed = checkpoint(autocast(workload, dtype), modules)
    predicted = predict(baseline, workload=workload, dtype=dtype, checkpoint=",".join(modules))
    settings = settings_of(baseline)
    return _Trial(
        name=f"{amp.name}+{plan.name}",
        kind=CandidateKind.AMP_CHECKPOINT,
        transform=f"checkpoint(autocast(workload, {dtype!r}), {modules!r})",
        changed=changed,
        predicted_step_s=predicted.step_time_s,
        predicted_peak_bytes=_peak(predicted),
        check=lambda: loss_curves_match(workload, changed, settings),
        arguments=(dtype, *modules),
    )


@dataclasses.dataclass(frozen=True)
class _Trial:
    """A candidate ready to run: its changed workload, its prediction, and its check."""

    name: str
    kind: CandidateKind
    transform: str
    changed: Workload
    predicted_step_s: float | None
    predicted_peak_bytes: int | None
    check: Callable[[], Equivalence]
    # What it was applied with: the dtype, or the modules.
    arguments: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()
    # Jobs one step of `changed` trains: its step time is shared among them.
    jobs: int = 1
    reason: str = ""


def _amp(workload: Workload, baseline: Profile, budget: int | None) -> list[_Trial]:
    settings = settings_of(baseline)
    dtypes = ["bf16", "fp16"] if settings.device is Device.CUDA else ["bf16"]
    trials = []
    for dtype in dtypes:
        pads = _padding(workload, dtype)
        changed = autocast(workload, dtype)
        predicted = predict(baseline, workload=workload, dtype=dtype)

        def check(changed: Workload = changed) -> Equivalence:
            return loss_curves_match(workload, changed, settings)

        trials.append(
            _Trial(
                name=f"amp-{dtype}",
                kind=CandidateKind.AMP,
                transform=f"autocast({dtype!r})",
                changed=changed,
                predicted_step_s=predicted.step_time_s,
                predicted_peak_bytes=_peak(predicted),
                check=check,
                arguments=(dtype,),
                suggestions=pads,
            )
        )
    return trials


def _padding(workload: Workload, dtype: str) -> tuple[str, ...]:
    """The layer sizes of `workload`'s model that `dtype`'s tensor cores cannot fully use,
    read from the model built on the meta device (sizes only, no memory); none when the
    model cannot be built there."""
    try:
        with torch.device("meta"):
            model = workload.model()
    except Exception:  # a model that needs real data to build says nothing here
        return ()
    return tuple(f"pad {s.text} for tensor cores" for s in padding_suggestions(model, dtype))


def _checkpoint(
    workload: Workload,
    baseline: Profile,
    budget: int | None,
    named: Sequence[str] | None,
    plans: list[PlannedCheckpoint],
) -> list[_Trial]:
    """The modules `named` checkpointed, else the planner's plan (see the module's
    docstring), every option it weighed added to `plans`."""
    assert baseline.memory is not None
    if named is not None:
        modules = list(named)
    else:
        if budget is None:
            choice = plan_checkpoint(
                baseline, workload, baseline.memory.activations_bytes // 2, "activations"
            )
        else:
            choice = plan_checkpoint(baseline, workload, budget)
        plans.extend(
            PlannedCheckpoint(
                modules=o.modules,
                peak_bytes=o.peak_bytes,
                activations_bytes=o.activations_bytes,
                recompute_s=o.recompute_s,
                chosen=o is choice.chosen,
            )
            for o in choice.options
        )
        modules = list(choice.chosen.modules)
    if not modules:
        raise ConfigError("the step fits the budget as it is: nothing to checkpoint.")
    changed = checkpoint(workload, modules)
    # Whole modules first: after `ops:`, `--checkpoint` reads every name as op by op.
    text = ",".join(sorted(modules, key=lambda m: parse_op_level(m) is not None))
    predicted = predict(baseline, workload=workload, checkpoint=text)
    return [
        _Trial(
            name="checkpoint",
            kind=CandidateKind.CHECKPOINT,
            transform=f"checkpoint({modules!r})",
            changed=changed,
            predicted_step_s=predicted.step_time_s,
            predicted_peak_bytes=_peak(predicted),
            check=lambda: gradients_match(workload, changed, settings_of(baseline)),
            arguments=tuple(modules),
        )
    ]


def _gist(workload: Workload, baseline: Profile, budget: int | None) -> list[_Trial]:
    savings = gist_savings(workload, baseline.hardware, settings_of(baseline))
    if not savings.helpful:
        raise ConfigError(
            "no ReLU, ReLU6, LeakyReLU or max-pool encoding frees memory here: the layers"
            " after them keep their outputs for their own backward."
        )
    changed = gist(workload, savings.helpful)
    shapes = profile_shape_only(changed, baseline.hardware, settings_of(baseline))
    return [
        _Trial(
            name="gist",
            kind=CandidateKind.GIST,
            transform=f"gist({list(savings.helpful)!r})",
            changed=changed,
            predicted_step_s=None,  # its cost is its own kernels', which nothing predicts
            predicted_peak_bytes=_peak(shapes),
            check=lambda: gradients_match(workload, changed, settings_of(baseline)),
        )
    ]


def _run(
    trial: _Trial, baseline: Profile, device: str | Device, budget_s: float, budget: int | None
) -> Candidate:
    """`trial` checked, then measured, then judged against the plain step and the memory
    budget (bytes, None: none); a failure of either says so in its row."""
    found = Candidate(
        name=trial.name,
        kind=trial.kind,
        transform=trial.transform,
        arguments=trial.arguments,
        predicted_step_s=trial.predicted_step_s,
        predicted_peak_bytes=trial.predicted_peak_bytes,
        suggestions=trial.suggestions,
        reason=trial.reason,
    )
    try:
        equivalence = trial.check()
        measured = profile(
            trial.changed, device=device, hardware=baseline.hardware, budget_s=budget_s
        )
    except LightspeedError as exc:
        return dataclasses.replace(found, verdict=Verdict.ERROR, reason=_reason(trial.name, exc))
    step = measured.step_time_s
    found = dataclasses.replace(
        found,
        equivalence=equivalence,
        measured_step_s=None if step is None else step / trial.jobs,
        measured_peak_bytes=_peak(measured),
        profile=measured,
    )
    return _judged(found, baseline, budget)


def _judged(found: Candidate, baseline: Profile, budget: int | None) -> Candidate:
    """The verdict on measured `found`: failed check, over budget, faster (by more than
    `MIN_GAIN`), or slower, with the reason for a failed check."""
    if found.equivalence is not None and not found.equivalence.passed:
        return dataclasses.replace(
            found, verdict=Verdict.FAILED_CHECK, reason=_failure(found.equivalence)
        )
    if budget is not None and (found.measured_peak_bytes or 0) > budget:
        verdict = Verdict.OVER_BUDGET
    elif found.measured_step_s is not None and found.measured_step_s * MIN_GAIN < (
        baseline.step_time_s or 0.0
    ):
        verdict = Verdict.FASTER
    else:
        verdict = Verdict.SLOWER
    return dataclasses.replace(found, verdict=verdict)


def _kept(baseline: Profile, budget: int | None, candidates: list[Candidate]) -> Tuning:
    """The tuning run with the one kept: with a memory budget the plain step exceeds, the
    fastest that fits it; otherwise the fastest of those judged faster."""
    over = budget is not None and (_peak(baseline) or 0) > budget
    eligible = [
        c
        for c in candidates
        if c.verdict is Verdict.FASTER or (over and c.verdict is Verdict.SLOWER)
    ]
    chosen = min(eligible, key=lambda c: c.measured_step_s or float("inf"), default=None)
    if chosen is not None:
        kept = dataclasses.replace(chosen, verdict=Verdict.KEPT)
        candidates = [kept if c is chosen else c for c in candidates]
        chosen = kept
    return Tuning(
        baseline=baseline,
        memory_budget_bytes=budget,
        candidates=tuple(candidates),
        chosen=chosen,
    )


def _reason(name: str, exc: LightspeedError) -> str:
    """`exc`'s message as the reason in candidate `name`'s row, which is read after the
    name ("checkpoint: …"): the optimize package's messages begin with the operation
    they come from, so that they read alone (`checkpoint_for_budget`, `lightspeed
    predict`); where that is the candidate's own name, it is not said twice."""
    return str(exc).removeprefix(f"{name}: ")


def _failure(check: Equivalence) -> str:
    return (
        f"{check.check}: {check.error:.3g} at {check.worst}, over the tolerance"
        f" {check.tolerance:.3g}"
    )


def _peak(found: Profile) -> int | None:
    return found.memory.peak_bytes if found.memory is not None else None
