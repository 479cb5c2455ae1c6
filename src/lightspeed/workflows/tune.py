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
- `checkpoint`: the planner's plan (`predict.checkpointing`) for the memory budget, or,
  without one, for half the activations the step keeps for backward;
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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import torch

from lightspeed.errors import ConfigError, LightspeedError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.facts.tuning import Candidate, Equivalence, LoaderTuning, Tuning
from lightspeed.measure.equivalence import gradients_match, loss_curves_match
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.optimize.encodings import gist
from lightspeed.optimize.padding import padding_suggestions
from lightspeed.optimize.precision import autocast
from lightspeed.predict.checkpointing import plan_checkpoint
from lightspeed.predict.encodings import gist_savings
from lightspeed.predict.shapes import settings_of
from lightspeed.predict.whatif import predict
from lightspeed.report.tune_report import speedup
from lightspeed.workflows.loader_tuning import tune_loader
from lightspeed.workflows.profile import profile
from lightspeed.workload import Workload

__all__ = ["CANDIDATES", "MIN_GAIN", "checkpoint_for_budget", "plan_code", "tune"]

CANDIDATES = ("amp", "checkpoint", "gist", "fuse", "loader")
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
) -> Tuning:
    """Every candidate (`only`: those named, from `CANDIDATES`) for `workload`'s step on
    `device`, placed on `hardware` (as `lightspeed.profile` takes it), each profiled with
    `budget_s` seconds of timing (see the module's docstring). `jobs`: K jobs of this
    step to run (a sweep's trials), which adds fusion. A candidate that cannot run says
    why in its row; the others go on."""
    names = list(CANDIDATES if only is None else only)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 2):
        raise ConfigError(f"--jobs {jobs!r}: fusion needs 2 jobs or more.")
    if only is not None and "fuse" in names and jobs is None:
        raise ConfigError(
            "--only fuse: say how many jobs of this step there are to fuse (--jobs K, the"
            " trials of a sweep)."
        )
    if jobs is None:
        names = [n for n in names if n != "fuse"]
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        raise ConfigError(
            f"--only {','.join(unknown)}: not a candidate; choose from {', '.join(CANDIDATES)}."
        )
    if memory_budget_bytes is not None and memory_budget_bytes < 1:
        raise ConfigError(f"--memory-budget {memory_budget_bytes} must be at least 1 byte.")
    if only is not None and "loader" in names and workload.loader is None:
        raise ConfigError(
            f"--only loader: workload {workload.name!r} has no data loader; give its"
            " Workload a loader (loader=lambda batch_size, **options: DataLoader(dataset,"
            " batch_size, **options)), or leave loader out."
        )
    baseline = profile(workload, device=device, hardware=hardware, budget_s=budget_s)
    loading, loading_error = None, ""
    if "loader" in names and workload.loader is not None:
        try:
            loading = tune_loader(workload, settings_of(baseline))
        except LightspeedError as exc:
            loading_error = str(exc)
    names = [n for n in names if n != "loader"]
    makers: dict[str, Callable[[Workload, Profile, int | None], list[_Trial]]] = {
        "amp": _amp,
        "checkpoint": _checkpoint,
        "gist": _gist,
        "fuse": lambda w, b, _budget: _fuse(w, b, jobs or 2),
    }
    candidates: list[Candidate] = []
    passed: dict[str, tuple[str, ...]] = {}  # equivalent candidates: their dtype or modules
    for name in names:
        try:
            trials = makers[name](workload, baseline, memory_budget_bytes)
        except LightspeedError as exc:
            candidates.append(Candidate(name=name, verdict="skipped", reason=str(exc)))
            continue
        for trial in trials:
            found = _run(trial, baseline, device, budget_s)
            candidates.append(found)
            if found.equivalence is not None and found.equivalence.passed:
                passed[trial.name] = trial.arguments
    combined = _combined(workload, baseline, passed)
    if combined is not None:
        candidates.append(_run(combined, baseline, device, budget_s))
    tuning = _judged(baseline, memory_budget_bytes, candidates)
    return dataclasses.replace(tuning, loading=loading, loading_error=loading_error)


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
    fake tensors, and `optimize.checkpoint` applying it. `workload` itself when it fits
    already; a ConfigError when no plan fits or the model has no stack of blocks."""
    if budget_bytes < 1:
        raise ConfigError(f"budget_bytes {budget_bytes} must be at least 1 byte.")
    baseline = profile(workload, device=device, hardware=hardware, budget_s=budget_s)
    modules = list(plan_checkpoint(baseline, workload, budget_bytes).chosen.modules)
    return checkpoint(workload, modules) if modules else workload


def _fuse(workload: Workload, baseline: Profile, jobs: int) -> list[_Trial]:
    """K jobs of the step fused: predicted from the plain step, checked by each job's
    loss after a few steps fused against the same job alone."""
    from lightspeed.optimize.fusion.fuse import fuse
    from lightspeed.predict.fusion import on_fused
    from lightspeed.report.profile_report import fusion_verdict

    changed = fuse(workload, jobs)
    predicted = on_fused(baseline, jobs)
    made = predicted.prediction
    assert made is not None and made.fusion is not None
    verdict = made.fusion
    step = predicted.step_time_s
    return [
        _Trial(
            name=f"fuse{jobs}",
            transform=f"fuse(workload, {jobs})",
            changed=changed,
            predicted_step_s=None if step is None else step / jobs,
            predicted_peak_bytes=_peak(predicted),
            check=lambda: _jobs_match(workload, jobs),
            arguments=(str(jobs),),
            jobs=jobs,
            reason="" if verdict.helps else fusion_verdict(False, verdict.overhead_share, jobs),
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
    workload: Workload, baseline: Profile, passed: Mapping[str, tuple[str, ...]]
) -> _Trial | None:
    """Mixed precision with the checkpoint plan, when each passed its check alone: the
    memory checkpointing frees at the speed autocast gains. None when either did not."""
    amp = next((name for name in passed if name.startswith("amp-")), None)
    if amp is None or "checkpoint" not in passed:
        return None
    (dtype,), modules = passed[amp], list(passed["checkpoint"])
    changed = checkpoint(autocast(workload, dtype), modules)
    predicted = predict(baseline, workload=workload, dtype=dtype, checkpoint=",".join(modules))
    settings = settings_of(baseline)
    return _Trial(
        name=f"{amp}+checkpoint",
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


def _checkpoint(workload: Workload, baseline: Profile, budget: int | None) -> list[_Trial]:
    assert baseline.memory is not None
    if budget is None:
        choice = plan_checkpoint(
            baseline, workload, baseline.memory.activations_bytes // 2, "activations"
        )
    else:
        choice = plan_checkpoint(baseline, workload, budget)
    modules = list(choice.chosen.modules)
    if not modules:
        raise ConfigError("the step fits the budget as it is: nothing to checkpoint.")
    changed = checkpoint(workload, modules)
    predicted = predict(baseline, workload=workload, checkpoint=",".join(modules))
    return [
        _Trial(
            name="checkpoint",
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
            transform=f"gist({list(savings.helpful)!r})",
            changed=changed,
            predicted_step_s=None,  # its cost is its own kernels', which nothing predicts
            predicted_peak_bytes=_peak(shapes),
            check=lambda: gradients_match(workload, changed, settings_of(baseline)),
        )
    ]


def _run(trial: _Trial, baseline: Profile, device: str | Device, budget_s: float) -> Candidate:
    """`trial` checked, then measured; a failure of either says so in its row."""
    found = Candidate(
        name=trial.name,
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
        return dataclasses.replace(found, verdict="error", reason=str(exc))
    step = measured.step_time_s
    return dataclasses.replace(
        found,
        equivalence=equivalence,
        measured_step_s=None if step is None else step / trial.jobs,
        measured_peak_bytes=_peak(measured),
        profile=measured,
        verdict="measured",
    )


def _judged(baseline: Profile, budget: int | None, candidates: list[Candidate]) -> Tuning:
    """Each measured candidate's verdict, and the one kept."""
    step = baseline.step_time_s or 0.0
    judged: list[Candidate] = []
    for c in candidates:
        if c.verdict != "measured":
            judged.append(c)
            continue
        if c.equivalence is not None and not c.equivalence.passed:
            verdict, reason = "failed check", _failure(c.equivalence)
        elif budget is not None and (c.measured_peak_bytes or 0) > budget:
            verdict, reason = "over budget", c.reason
        elif c.measured_step_s is not None and c.measured_step_s * MIN_GAIN < step:
            verdict, reason = "faster", c.reason
        else:
            verdict, reason = "slower", c.reason
        judged.append(dataclasses.replace(c, verdict=verdict, reason=reason))
    eligible = [
        c
        for c in judged
        if c.verdict == "faster"
        or (budget is not None and c.verdict == "slower" and (_peak(baseline) or 0) > budget)
    ]
    chosen = min(eligible, key=lambda c: c.measured_step_s or float("inf"), default=None)
    if chosen is not None:
        judged = [dataclasses.replace(c, verdict="kept") if c is chosen else c for c in judged]
        chosen = next(c for c in judged if c.verdict == "kept")
    return Tuning(
        baseline=baseline,
        memory_budget_bytes=budget,
        candidates=tuple(judged),
        chosen=chosen,
    )


def _failure(check: Equivalence) -> str:
    return (
        f"{check.check}: {check.error:.3g} at {check.worst}, over the tolerance"
        f" {check.tolerance:.3g}"
    )


def _peak(found: Profile) -> int | None:
    return found.memory.peak_bytes if found.memory is not None else None


def plan_code(tuning: Tuning) -> str:
    """The kept candidate as Python a training script can run on its own model (named
    `model`) and around its own loss: plain PyTorch where PyTorch has it (autocast, its
    loss scaler, checkpoint of whole modules), lightspeed's own modules where it does not
    (segments of blocks, Gist's encodings). A comment when nothing was kept."""
    base = tuning.baseline
    head = f"# lightspeed tune {base.workload.name}"
    chosen = tuning.chosen
    loading = _loader_code(tuning.loading) if tuning.loading is not None else []
    if chosen is None and not tuning.candidates:
        lines = [f"{head}: the data loader's options."]
    elif chosen is None:
        lines = [f"{head}: no candidate was equivalent and faster (or fit the budget)."]
    else:
        faster = speedup(base.step_time_s, chosen.measured_step_s)
        speed = f", {faster:.2f}× the plain step's speed" if faster is not None else ""
        lines = [f"{head}: kept {chosen.name}{speed}.", *_code(chosen)]
    if loading:
        lines += ["", *loading]
    return "\n".join(lines) + "\n"


def _loader_code(loading: LoaderTuning) -> list[str]:
    """The kept DataLoader options as code (nothing when the first setting was kept)."""
    if loading.chosen == 0:
        return []
    kept = loading.kept
    options = ", ".join(f"{k}={v!r}" for k, v in kept.options.kwargs().items())
    removed = loading.wait_removed
    threads = kept.threads != loading.runs[0].threads
    lines = [
        *(["import torch"] if threads else []),
        "from torch.utils.data import DataLoader",
        "",
        "# The DataLoader options that waited least for data"
        + (f" ({removed:.0%} of the wait removed, measured)." if removed is not None else "."),
        f"loader = DataLoader(dataset, batch_size=batch_size, {options})",
    ]
    if threads:
        lines += [
            "# The step's own threads, leaving the workers cores of their own.",
            f"torch.set_num_threads({kept.threads})",
        ]
    return lines


def _code(chosen: Candidate) -> list[str]:
    """The lines that apply `chosen` (each part of a combination, checkpointing first)."""
    if chosen.name.startswith("fuse"):
        (jobs,) = chosen.arguments
        return [
            "import lightspeed",
            "",
            f"# {jobs} jobs of the step (a sweep's trials) as one: each job's"
            " hyper-parameters in hparams.",
            f"fused = lightspeed.fuse(workload, {jobs}, hparams=[{{}}] * {jobs})",
        ]
    parts = chosen.name.split("+")
    amp = next((part for part in parts if part.startswith("amp-")), None)
    modules = list(chosen.arguments[1:] if amp else chosen.arguments)
    lines: list[str] = []
    if "checkpoint" in parts:
        lines += _checkpoint_code(modules)
    if "gist" in parts:
        lines += [
            "from lightspeed.optimize.encodings import gist_model",
            "",
            "# ReLU and max-pool modules that keep a bit (a byte) an element for backward.",
            f"gist_model(model, lambda name: name in {set(modules)!r})",
        ]
    if amp is not None:
        lines += _amp_code({"amp-bf16": "bfloat16", "amp-fp16": "float16"}[amp])
    return lines


def _amp_code(dtype: str) -> list[str]:
    lines = [
        "import torch",
        "",
        "# The forward and the loss under autocast; backward and the optimizer outside it.",
        f"with torch.autocast(device_type='cpu', dtype=torch.{dtype}):  # or 'cuda'",
        "    loss = loss_fn(model(inputs), targets)",
    ]
    if dtype == "float16":
        lines += [
            "# fp16: a dynamic loss scaler (growth 2, back-off 0.5, interval 2000).",
            "scaler = torch.amp.GradScaler()  # once, before the loop",
            "scaler.scale(loss).backward()",
            "scaler.step(optimizer)",
            "scaler.update()",
        ]
    return lines


def _checkpoint_code(modules: list[str]) -> list[str]:
    if any(":" in m for m in modules):
        return [
            "from lightspeed.optimize.checkpointing import checkpoint_model",
            "",
            "# Segments of consecutive blocks (STACK.I:J), each recomputed as one in backward.",
            f"checkpoint_model(model, {modules!r})",
        ]
    return [
        "import torch.utils.checkpoint",
        "",
        "# Each module's forward recomputed in backward instead of keeping its activations.",
        f"for name in {modules!r}:",
        "    module = model.get_submodule(name)",
        "    module.forward = lambda *args, _forward=module.forward, **kwargs: (",
        "        torch.utils.checkpoint.checkpoint(",
        "            _forward, *args, use_reentrant=False, **kwargs",
        "        )",
        "    )",
    ]
