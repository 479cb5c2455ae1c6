"""`sweep(workload, space, …)`: a hyper-parameter search whose trials train K at a time
as one fused job (`optimize.fusion`), driven by Optuna's ask-and-tell interface.

The driver (Optuna's TPE sampler, seeded) is asked for K trials; the K train together
as one `FusedModel` with a `FusedOptimizer` holding each trial's hyper-parameters, for
`steps` steps; each trial's loss at the last step is told back, and the next K are
asked. Every trial sees the same batches (the workload's `batch`, drawn from torch's
generator seeded by the step), and trial i's model is initialised from a seed of its
own (`optimize.fusion.build_job`), so a trial's result does not depend on which trials
it was fused with, and the same trial run alone gives the same loss, to rounding.

A workload that fails part-way (an error, out of memory) stops the sweep with a
`SweepIncomplete` that holds the trials finished before it.

A trial diverges when a step's loss or gradients are not finite: fused, it stops
updating (the fused optimizer skips its steps) while the others go on; alone, it stops.
Its loss is then None, told to the driver as a failed trial.

The serial sweep's time is measured, not assumed: a sample of the trials is run again
one at a time, each as its lone job (the workload's own model with PyTorch's optimizer),
their losses set beside the fused ones, and their mean wall time × the trials, plus the
driver's own time, is the serial estimate.

Optuna is an optional dependency (`pip install 'lightspeed[sweep]'`).
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lightspeed import progress
from lightspeed.errors import ConfigError, LightspeedError, SweepIncomplete
from lightspeed.facts.device import Device
from lightspeed.facts.sweep import Dimension, SerialCheck, Sweep, Trial
from lightspeed.measure.device import require
from lightspeed.measure.step import StepSettings, guard, to_device
from lightspeed.measure.workload_timing import workload_info
from lightspeed.optimize.fusion.fuse import (
    FusedModel,
    build_job,
    lone_optimizer,
    optimizer_hparams,
    shared,
)
from lightspeed.optimize.fusion.optimizer import HYPERPARAMETERS, FusedOptimizer
from lightspeed.workload import Workload

__all__ = ["parse_space", "run_alone", "run_fused", "sweep"]

_SPEC = re.compile(
    r"\s*(?P<name>[A-Za-z_]\w*)\s*=\s*"
    r"(?P<spec>(?P<kind>loguniform|uniform)\s*\((?P<args>[^)]*)\)|\[(?P<choices>[^\]]*)\])"
    r"\s*,?"
)


def parse_space(text: str, algorithm: str) -> tuple[Dimension, ...]:
    """The search space `text` names: "NAME=loguniform(LOW,HIGH)", "NAME=uniform(LOW,HIGH)"
    or "NAME=[V,V,…]" (a choice), separated by spaces, over the hyper-parameters of
    `algorithm`'s fused optimizer ("sgd", "adam", "adamw")."""
    names = HYPERPARAMETERS[algorithm]
    found: list[Dimension] = []
    at = 0
    while at < len(text.rstrip()):
        match = _SPEC.match(text, at)
        if match is None:
            raise ConfigError(
                f"--space: cannot read {text[at:].strip()!r}; write NAME=loguniform(LOW,HIGH),"
                " NAME=uniform(LOW,HIGH) or NAME=[V,V,…], separated by spaces"
                ' ("lr=loguniform(1e-5,1e-2) weight_decay=[0,0.01]").'
            )
        at = match.end()
        name, spec = match["name"], match["spec"].strip()
        if name not in names:
            raise ConfigError(
                f"--space: {algorithm} has no hyper-parameter {name!r}; it takes"
                f" {', '.join(names)}."
            )
        if any(d.name == name for d in found):
            raise ConfigError(f"--space: {name} is given twice.")
        found.append(_dimension(name, match, spec))
    if not found:
        raise ConfigError("--space: give at least one hyper-parameter to search.")
    return tuple(found)


def _dimension(name: str, match: re.Match[str], spec: str) -> Dimension:
    where = f"--space {name}={spec}"
    if match["choices"] is not None:
        choices = tuple(_number(v, where) for v in match["choices"].split(",") if v.strip())
        if not choices:
            raise ConfigError(f"{where}: list at least one value.")
        return Dimension(name=name, kind="choice", choices=choices, text=f"{name}={spec}")
    args = [_number(v, where) for v in match["args"].split(",")]
    if len(args) != 2 or not args[0] < args[1]:
        raise ConfigError(f"{where}: give two numbers, LOW then HIGH, LOW < HIGH.")
    if match["kind"] == "loguniform" and args[0] <= 0:
        raise ConfigError(f"{where}: a log-uniform range must be above 0.")
    return Dimension(
        name=name, kind=match["kind"], low=args[0], high=args[1], text=f"{name}={spec}"
    )


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{where}: {text.strip()!r} is not a number.") from None


def sweep(
    workload: Workload,
    space: str | Sequence[Dimension],
    *,
    trials: int,
    k: int,
    steps: int,
    seed: int = 0,
    serial_sample: int = 4,
    device: str | Device = "cpu",
) -> Sweep:
    """Search `space` with `trials` trials of `steps` steps each, trained `k` at a time as
    one fused job (see the module's docstring); `serial_sample` trials are then run
    again one at a time to measure the serial sweep's time (0: none)."""
    optuna = _optuna()
    algorithm, defaults, nesterov = optimizer_hparams(workload)
    dims = parse_space(space, algorithm) if isinstance(space, str) else tuple(space)
    for name, value, least in (("--trials", trials, 1), ("--k", k, 1), ("--steps", steps, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} {value!r} must be a whole number, at least {least}.")
    if serial_sample < 0:
        raise ConfigError(f"--serial-sample {serial_sample} must be 0 or more.")
    where = Device.parse(device) if isinstance(device, str) else device
    info = workload_info(workload, StepSettings(device=where))

    def result(
        found: list[Trial],
        wall: float,
        driver: float,
        serial: SerialCheck | None,
        failure: str | None,
    ) -> Sweep:
        finished = [t for t in found if t.loss is not None]
        return Sweep(
            workload=info,
            space=dims,
            k=k,
            steps=steps,
            trials=tuple(found),
            best=min(finished, key=lambda t: t.loss or 0.0).number if finished else None,
            wall_s=wall,
            driver_s=driver,
            serial=serial,
            sampler=f"optuna {optuna.__version__} TPESampler",
            seed=seed,
            failure=failure,
        )

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    distributions = {d.name: _distribution(optuna, d) for d in dims}
    found: list[Trial] = []
    driver = 0.0
    start = time.perf_counter()
    with progress.counting(trials) as advance:
        while len(found) < trials:
            ticked = time.perf_counter()
            asked = [study.ask(distributions) for _ in range(min(k, trials - len(found)))]
            driver += time.perf_counter() - ticked
            params = [dict(t.params) for t in asked]
            numbers = [t.number for t in asked]
            try:
                with progress.stage(f"trials {numbers[0]}–{numbers[-1]} of {trials}, fused"):
                    losses = run_fused(
                        workload,
                        params,
                        numbers,
                        steps=steps,
                        seed=seed,
                        device=where,
                        algorithm=(algorithm, defaults, nesterov),
                    )
            except LightspeedError as exc:
                # The trials finished so far are kept, and written by the caller.
                message = f"the sweep stopped after {len(found)} of {trials} trials: {exc}"
                partial = result(found, time.perf_counter() - start, driver, None, message)
                raise SweepIncomplete(message, partial) from exc
            ticked = time.perf_counter()
            group = len(found) // k
            for trial, number, p, loss in zip(asked, numbers, params, losses, strict=True):
                if loss is None:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    study.tell(trial, loss)
                found.append(Trial(number=number, group=group, params=p, loss=loss))
                advance()
            driver += time.perf_counter() - ticked
    wall = time.perf_counter() - start
    serial = _serial_check(
        workload, found, serial_sample, steps, seed, where, (algorithm, defaults, nesterov)
    )
    return result(found, wall, driver, serial, None)


Algorithm = tuple[str, Mapping[str, float], bool]


def run_fused(
    workload: Workload,
    params: Sequence[Mapping[str, float]],
    numbers: Sequence[int],
    *,
    steps: int,
    seed: int,
    device: Device = Device.CPU,
    algorithm: Algorithm | None = None,
) -> list[float | None]:
    """Trials `numbers`, with hyper-parameters `params`, trained together as one fused
    job for `steps` steps; each one's loss at the last step (None: it diverged)."""
    kind, defaults, nesterov = algorithm or optimizer_hparams(workload)
    on = require(device)
    with guard(workload, "building the trials' models"):
        models = [build_job(workload, _seed(seed, "model", n)) for n in numbers]
        fused = FusedModel(models).to(on).train()
    optimizer = FusedOptimizer(
        fused.parameters(), kind, list(params), defaults=defaults, nesterov=nesterov
    )
    k = len(numbers)
    losses = torch.zeros(k)
    for step in range(steps):
        batch = _batch(workload, seed, step, on)
        shared_batches = shared(batch, k)
        optimizer.zero_grad(set_to_none=True)
        with guard(workload, "the fused training step"):
            if step < steps - 1:
                fused.loss(workload.loss, shared_batches).backward()
            else:  # each trial's own loss, to report
                per_job = fused.per_job(workload.loss, shared_batches)
                per_job.sum().backward()
                losses = per_job.detach().float().cpu()
        optimizer.step()
    skipped = optimizer.skipped.cpu()
    return [
        float(loss) if math.isfinite(float(loss)) and int(skipped[j]) == 0 else None
        for j, loss in enumerate(losses)
    ]


def run_alone(
    workload: Workload,
    params: Mapping[str, float],
    number: int,
    *,
    steps: int,
    seed: int,
    device: Device = Device.CPU,
    algorithm: Algorithm | None = None,
    fused_kernel: bool | None = None,
) -> float | None:
    """Trial `number` trained alone, the workload's own model with PyTorch's optimizer
    (`fused_kernel`: as torch.optim's `fused`), on the batches a fused sweep gives it;
    its loss at the last step (None: it diverged)."""
    kind, defaults, nesterov = algorithm or optimizer_hparams(workload)
    on = require(device)
    with guard(workload, "building the trial's model"):
        model = build_job(workload, _seed(seed, "model", number)).to(on).train()
    optimizer = lone_optimizer(
        kind, model.parameters(), {**defaults, **params}, nesterov=nesterov, fused=fused_kernel
    )
    loss = torch.zeros(())
    for step in range(steps):
        batch = _batch(workload, seed, step, on)
        optimizer.zero_grad(set_to_none=True)
        with guard(workload, "the training step"):
            loss = workload.loss(model, batch)
            loss.backward()
        if not math.isfinite(float(loss.detach())):
            return None
        optimizer.step()
    # A gradient that was not finite left its parameters so, whatever the loss said.
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        return None
    return float(loss.detach())


def _serial_check(
    workload: Workload,
    found: Sequence[Trial],
    sample: int,
    steps: int,
    seed: int,
    device: Device,
    algorithm: Algorithm,
) -> SerialCheck | None:
    """`sample` trials, spread over the sweep, run one at a time and timed."""
    if sample == 0 or not found:
        return None
    count = min(sample, len(found))
    picks = sorted({round(i * (len(found) - 1) / max(count - 1, 1)) for i in range(count)})
    chosen = [found[i] for i in picks]
    seconds, losses = [], []
    for trial in chosen:
        with progress.stage(f"trial {trial.number} alone, to time the serial sweep"):
            start = time.perf_counter()
            losses.append(
                run_alone(
                    workload,
                    trial.params,
                    trial.number,
                    steps=steps,
                    seed=seed,
                    device=device,
                    algorithm=algorithm,
                )
            )
            seconds.append(time.perf_counter() - start)
    return SerialCheck(
        trials=tuple(t.number for t in chosen), seconds=tuple(seconds), losses=tuple(losses)
    )


def _batch(workload: Workload, seed: int, step: int, device: torch.device) -> Any:
    """Step `step`'s batch, the same for every trial."""
    torch.manual_seed(_seed(seed, "data", step))
    with guard(workload, "batch(n)"):
        raw = workload.batch(workload.batch_size)
    return to_device(raw, device, torch.float32)


def _seed(seed: int, kind: str, index: int) -> int:
    """A seed of its own for each (sweep seed, kind, index)."""
    return random.Random(f"{seed}:{kind}:{index}").getrandbits(62)


def _distribution(optuna: Any, d: Dimension) -> Any:
    if d.kind == "choice":
        return optuna.distributions.CategoricalDistribution(d.choices)
    assert d.low is not None and d.high is not None
    return optuna.distributions.FloatDistribution(d.low, d.high, log=d.kind == "loguniform")


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ConfigError(
            "lightspeed sweep drives its search with Optuna, which is not installed:"
            " pip install 'lightspeed[sweep]' (or optuna)."
        ) from None
    return optuna
