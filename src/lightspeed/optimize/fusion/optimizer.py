"""Optimizers that update K jobs' parameters at once, each job with its own
hyper-parameters: the optimizer half of horizontal fusion (`optimize.fusion`).

Every parameter holds K jobs stacked on its first dimension; every hyper-parameter is a
`[K]` tensor, broadcast over the rest. The updates are PyTorch's own algorithms as
`torch.optim.SGD`, `Adam` and `AdamW` document them (the single-tensor path, in the
same order of operations), so that each job's parameters follow the ones the job
would reach alone with PyTorch's optimizer, to rounding.

A job whose gradients hold an inf or a NaN skips its update (its parameters, moments
and step count stay as they were), so one diverging job does not poison the others;
`skipped` counts each job's skipped steps. A job's gradients count as non-finite when
their sum is (an inf or a NaN anywhere makes it so; so does a sum past the dtype's
range).

Where this torch has them (`torch_fused`), each job is updated by PyTorch's fused kernel
for its algorithm (one pass over each tensor; `torch.optim.AdamW(fused=True)`'s), on
views of its slices, with its own hyper-parameters as numbers; a job that skips is not
called. Otherwise the update runs on all parameters at once with `torch._foreach_*`
kernels, so its cost in operator launches does not grow with the number of parameters:
in place when every job's gradients are finite (the usual step), else into copies kept
job by job with a mask, by the same arithmetic, so a job's values do not depend on
whether another job skipped. Either way the step reads the finite flags from the device
once, as `torch.amp.GradScaler.step` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from lightspeed.errors import ConfigError
from lightspeed.optimize.fusion import torch_fused

__all__ = ["HYPERPARAMETERS", "FusedOptimizer", "JobLossScaler", "check_hparams"]

# Each algorithm's hyper-parameters and PyTorch's defaults for them.
HYPERPARAMETERS: Mapping[str, Mapping[str, float]] = {
    "sgd": {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0},
    "adam": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
    "adamw": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2},
}


def check_hparams(algorithm: str, hparams: Sequence[Mapping[str, float]]) -> None:
    """A ConfigError unless `algorithm` has a fused form and every job's
    hyper-parameters are among its own."""
    if algorithm not in HYPERPARAMETERS:
        raise ConfigError(
            f"fused optimizer {algorithm!r}: choose one of {', '.join(HYPERPARAMETERS)}."
        )
    if len(hparams) < 1:
        raise ConfigError("a fused optimizer needs the hyper-parameters of 1 job or more.")
    names = HYPERPARAMETERS[algorithm]
    for job in hparams:
        unknown = sorted(set(job) - set(names))
        if unknown:
            raise ConfigError(
                f"{algorithm} has no hyper-parameter {', '.join(unknown)}; it takes"
                f" {', '.join(names)}."
            )


class FusedOptimizer(torch.optim.Optimizer):
    """`algorithm` ("sgd", "adam" or "adamw") over parameters stacked K jobs deep, with
    `hparams[k]` the k-th job's hyper-parameters (names of `HYPERPARAMETERS`; the rest
    PyTorch's defaults, or `defaults`). `nesterov` as SGD's, for every job. `kernels`:
    update job by job with PyTorch's fused kernels where this torch has them (False:
    always the `_foreach_` path)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        algorithm: str,
        hparams: Sequence[Mapping[str, float]],
        *,
        defaults: Mapping[str, float] | None = None,
        nesterov: bool = False,
        kernels: bool = True,
    ) -> None:
        check_hparams(algorithm, hparams)
        names = HYPERPARAMETERS[algorithm]
        base = {**names, **(defaults or {})}
        k = len(hparams)
        params = list(params)
        for p in params:
            if p.dim() == 0 or p.shape[0] != k:
                raise ConfigError(
                    f"a fused parameter of shape {tuple(p.shape)} does not hold {k} jobs on"
                    " its first dimension."
                )
        if nesterov and algorithm != "sgd":
            raise ConfigError("nesterov applies to sgd only.")
        self.algorithm = algorithm
        self.nesterov = nesterov
        self.k = k
        super().__init__(params, {})
        reference = params[0] if params else torch.zeros(())
        self.hparams = {
            name: torch.tensor(
                [float(job.get(name, base[name])) for job in hparams],
                dtype=reference.dtype,
                device=reference.device,
            )
            for name in names
        }
        self.skipped = torch.zeros(k, dtype=torch.int64)
        # Which jobs' gradients were finite at the last step (all, before one).
        self.last_finite = torch.ones(k, dtype=torch.bool)
        self._shaped: tuple[Any, dict[str, list[torch.Tensor]]] | None = None
        self._job_views: tuple[Any, list[tuple[tuple[torch.Tensor, ...], ...]]] | None = None
        # Whether to update job by job with PyTorch's fused kernels where it has them.
        self.kernels = kernels
        self._kernel_key: tuple[Any, bool] | None = None
        self._values: tuple[Any, dict[str, list[float]]] | None = None

    def set_hparam(self, name: str, values: Sequence[float] | torch.Tensor) -> None:
        """Every job's `name` (a learning rate from each job's schedule, say), one value
        a job."""
        if name not in self.hparams:
            raise ConfigError(
                f"{self.algorithm} has no hyper-parameter {name}; it takes"
                f" {', '.join(self.hparams)}."
            )
        current = self.hparams[name]
        found = torch.as_tensor(values, dtype=current.dtype, device=current.device)
        if found.shape != current.shape:
            raise ConfigError(f"{name}: {found.numel()} values for {self.k} jobs.")
        current.copy_(found)

    def job_hparams(self, job: int) -> dict[str, float]:
        """Job `job`'s hyper-parameters, as plain numbers."""
        return {name: float(values[job]) for name, values in self.hparams.items()}

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One update of every job whose gradients are all finite."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return loss
        grads = [p.grad for p in params if p.grad is not None]
        sums = torch.stack([_job_sums(g) for g in grads])
        finite = torch.isfinite(sums.sum(dim=0))
        self.skipped += (~finite).to(self.skipped.device, torch.int64)
        self.last_finite = finite
        states = [self.state[p] for p in params]
        if self.kernels and self._kernels_for(params):
            self._job_by_job(params, grads, states, finite)
            return loss
        every = bool(finite.all())
        if self.algorithm == "sgd":
            self._sgd(params, grads, states, self._shaped_like(params), finite, every)
        else:
            self._adam(params, grads, states, self._shaped_like(params), finite, every)
        return loss

    def _job_by_job(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[dict[str, Any]],
        finite: torch.Tensor,
    ) -> None:
        """Each job whose gradients are finite updated by PyTorch's fused kernel for its
        algorithm, on views of its slices, with its own hyper-parameters."""
        keep = finite.tolist()
        values = self._numbers()
        grad_jobs = list(zip(*(g.unbind(0) for g in grads), strict=True))
        if self.algorithm == "sgd":
            self._sgd_jobs(params, grad_jobs, states, finite, keep, values)
            return
        _counts(params, states, finite)
        jobs = self._slices(params, states, ("exp_avg", "exp_avg_sq", "step"))
        for k, (slices, m, v, t) in enumerate(jobs):
            if keep[k]:
                torch_fused.adam_step(
                    self.algorithm,
                    list(slices),
                    list(grad_jobs[k]),
                    list(m),
                    list(v),
                    list(t),
                    lr=values["lr"][k],
                    beta1=values["beta1"][k],
                    beta2=values["beta2"][k],
                    weight_decay=values["weight_decay"][k],
                    eps=values["eps"][k],
                )

    def _kernels_for(self, params: list[torch.Tensor]) -> bool:
        """Whether the fused kernels take these parameters (and their gradients, of the
        same dtype and device), worked out once for each set of dtypes and devices."""
        key = tuple((p.dtype, p.device) for p in params)
        if self._kernel_key is None or self._kernel_key[0] != key:
            self._kernel_key = (key, torch_fused.available(self.algorithm, params))
        return self._kernel_key[1]

    def _numbers(self) -> dict[str, list[float]]:
        """Each hyper-parameter as plain numbers, one a job; read again only once a
        hyper-parameter changes (its tensor's version counter moves)."""
        key = tuple(v._version for v in self.hparams.values())
        if self._values is None or self._values[0] != key:
            self._values = (key, {name: v.tolist() for name, v in self.hparams.items()})
        return self._values[1]

    def _sgd_jobs(
        self,
        params: list[torch.Tensor],
        grad_jobs: list[tuple[torch.Tensor, ...]],
        states: list[dict[str, Any]],
        finite: torch.Tensor,
        keep: list[bool],
        values: Mapping[str, list[float]],
    ) -> None:
        _momentum_state(params, states, finite)
        started = states[0]["started"].tolist()
        jobs = self._slices(params, states, ("momentum_buffer",))
        for k, (slices, buf) in enumerate(jobs):
            if keep[k]:
                torch_fused.sgd_step(
                    list(slices),
                    list(grad_jobs[k]),
                    list(buf),
                    lr=values["lr"][k],
                    momentum=values["momentum"][k],
                    dampening=values["dampening"][k],
                    weight_decay=values["weight_decay"][k],
                    nesterov=self.nesterov,
                    first=not started[k],
                )
        _started(states, finite)

    def _slices(
        self, params: list[torch.Tensor], states: list[dict[str, Any]], names: Sequence[str]
    ) -> list[tuple[tuple[torch.Tensor, ...], ...]]:
        """For each job, its slice of every parameter and of each of their state tensors
        `names`: views, kept while the tensors they view stay the same."""
        tensors = [
            t for p, s in zip(params, states, strict=True) for t in (p, *(s[n] for n in names))
        ]
        key = tuple((t.data_ptr(), tuple(t.shape)) for t in tensors)
        if self._job_views is None or self._job_views[0] != key:
            per_tensor = [
                [p.unbind(0) for p in params],
                *([s[n].unbind(0) for s in states] for n in names),
            ]
            jobs = [
                tuple(tuple(views[k] for views in kind) for kind in per_tensor)
                for k in range(self.k)
            ]
            self._job_views = (key, jobs)
        return self._job_views[1]

    def _shaped_like(self, params: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
        """Each hyper-parameter, and the few values derived from them, as one view a
        parameter, shaped to broadcast over it (one reshape for each distinct rank);
        kept until a hyper-parameter changes (its tensor's version counter moves)."""
        key = (
            tuple(v._version for v in self.hparams.values()),
            tuple(p.dim() for p in params),
        )
        if self._shaped is None or self._shaped[0] != key:
            self._shaped = (key, self._derive(params))
        return self._shaped[1]

    def _derive(self, params: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
        hp = self.hparams
        derived = dict(hp)
        if self.algorithm == "sgd":
            derived["1-dampening"] = 1 - hp["dampening"]
        else:
            derived["1-beta1"] = 1 - hp["beta1"]
            derived["1-beta2"] = 1 - hp["beta2"]
            derived["1-lr*weight_decay"] = 1 - hp["lr"] * hp["weight_decay"]
        by_rank: dict[int, dict[str, torch.Tensor]] = {}
        for p in params:
            if p.dim() not in by_rank:
                by_rank[p.dim()] = {name: _along(v, p) for name, v in derived.items()}
        return {name: [by_rank[p.dim()][name] for p in params] for name in derived}

    def _sgd(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[dict[str, Any]],
        h: Mapping[str, list[torch.Tensor]],
        finite: torch.Tensor,
        every: bool,
    ) -> None:
        momentum = self.hparams["momentum"] != 0
        if bool((self.hparams["weight_decay"] != 0).any()):
            grads = list(torch._foreach_add(grads, torch._foreach_mul(params, h["weight_decay"])))
        direction = grads
        if bool(momentum.any()):
            _momentum_state(params, states, finite)
            bufs = [s["momentum_buffer"] for s in states]
            moved = _writable(bufs, every)
            torch._foreach_mul_(moved, h["momentum"])
            torch._foreach_add_(moved, torch._foreach_mul(grads, h["1-dampening"]))
            # PyTorch starts the buffer at the first gradient, undamped; a job that
            # skipped its first step starts it at its first finite one.
            for s, b, g in zip(states, moved, grads, strict=True):
                if not bool(s["started"].all()):
                    b.copy_(torch.where(_along(s["started"], g), b, g))
            direction = (
                list(torch._foreach_add(grads, torch._foreach_mul(moved, h["momentum"])))
                if self.nesterov
                else moved
            )
            if not bool(momentum.all()):
                # Without momentum PyTorch steps along the gradient itself.
                direction = [
                    torch.where(_along(momentum, g), d, g)
                    for d, g in zip(direction, grads, strict=True)
                ]
            _commit(bufs, moved, finite, every)
            _started(states, finite)
        stepped = _writable(params, every)
        torch._foreach_sub_(stepped, torch._foreach_mul(direction, h["lr"]))
        _commit(params, stepped, finite, every)

    def _adam(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[dict[str, Any]],
        h: Mapping[str, list[torch.Tensor]],
        finite: torch.Tensor,
        every: bool,
    ) -> None:
        counts = _counts(params, states, finite)
        hp = self.hparams
        corrections = {
            key: (hp["lr"] / (1 - hp["beta1"] ** t), (1 - hp["beta2"] ** t).sqrt())
            for key, t in counts.items()
        }
        step_size, bias2_sqrt = [], []
        for p, s in zip(params, states, strict=True):
            size, root = corrections[id(s["step"])]
            step_size.append(_along(size, p))
            bias2_sqrt.append(_along(root, p))
        if self.algorithm == "adam" and bool((hp["weight_decay"] != 0).any()):
            grads = list(torch._foreach_add(grads, torch._foreach_mul(params, h["weight_decay"])))
        m = [s["exp_avg"] for s in states]
        v = [s["exp_avg_sq"] for s in states]
        new_m, new_v, new_p = _writable(m, every), _writable(v, every), _writable(params, every)
        if self.algorithm == "adamw":
            torch._foreach_mul_(new_p, h["1-lr*weight_decay"])
        torch._foreach_lerp_(new_m, grads, h["1-beta1"])
        torch._foreach_mul_(new_v, h["beta2"])
        squared = torch._foreach_mul(grads, grads)
        torch._foreach_mul_(squared, h["1-beta2"])
        torch._foreach_add_(new_v, squared)
        # p - step_size · m / (√v / √(1 - β₂ᵗ) + ε), with step_size folded into the
        # denominator so the last step is one addcdiv.
        denom = torch._foreach_sqrt(new_v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, h["eps"])
        torch._foreach_div_(denom, step_size)
        torch._foreach_addcdiv_(new_p, new_m, denom, value=-1)
        _commit(m, new_m, finite, every)
        _commit(v, new_v, finite, every)
        _commit(params, new_p, finite, every)


class JobLossScaler:
    """A dynamic loss scale for each of K fused jobs (fp16 training), as
    `torch.amp.GradScaler` keeps one for a job alone: each job's loss is multiplied by
    its scale before backward (`scale`), its gradients divided by it before the
    optimizer's step (`step`), and after the step (`update`) the scale of a job whose
    gradients were not finite is multiplied by `backoff_factor`, the optimizer having
    skipped that job alone, while a job with `growth_interval` finite steps in a row has
    its scale multiplied by `growth_factor`. One job's overflow leaves the others'
    scales and updates as they were.

    `scales` ([K], float32) and the count of each job's finite steps in a row are its
    state.
    """

    def __init__(
        self,
        k: int,
        *,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        device: torch.device | str = "cpu",
    ) -> None:
        if not (growth_factor > 1.0 and 0.0 < backoff_factor < 1.0 and growth_interval >= 1):
            raise ConfigError(
                "a loss scaler grows by a factor above 1, backs off by one between 0 and 1,"
                " and grows after 1 finite step or more."
            )
        self.scales = torch.full((k,), float(init_scale), dtype=torch.float32, device=device)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self._finite_steps = torch.zeros(k, dtype=torch.int64, device=device)

    def scale(self, losses: torch.Tensor) -> torch.Tensor:
        """The sum of the K jobs' losses (`losses`, [K]), each times its job's scale: the
        tensor to call backward on."""
        return (losses * self.scales.to(losses.dtype)).sum()

    def step(self, optimizer: FusedOptimizer) -> None:
        """Each job's gradients divided by its scale, then `optimizer`'s step (which skips
        the jobs whose gradients are not finite)."""
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        grads = [p.grad for p in params if p.grad is not None]
        inverse = 1.0 / self.scales
        torch._foreach_mul_(grads, [_along(inverse.to(g.dtype), g) for g in grads])
        optimizer.step()

    def update(self, optimizer: FusedOptimizer) -> None:
        """Each job's scale after the step: backed off where its gradients were not
        finite, grown after `growth_interval` finite steps in a row."""
        finite = optimizer.last_finite.to(self.scales.device)
        self._finite_steps = torch.where(finite, self._finite_steps + 1, 0)
        grow = self._finite_steps >= self.growth_interval
        self.scales = torch.where(
            finite,
            torch.where(grow, self.scales * self.growth_factor, self.scales),
            self.scales * self.backoff_factor,
        )
        self._finite_steps = torch.where(grow, 0, self._finite_steps)


def _momentum_state(
    params: list[torch.Tensor], states: list[dict[str, Any]], finite: torch.Tensor
) -> None:
    """SGD's state started where missing: a momentum buffer of each parameter's shape,
    and whether each job has taken its first step (PyTorch starts the buffer then). A
    job steps every parameter or none, so the parameters started together share one
    flag ([K]), as Adam's share their step counts."""
    shared = torch.zeros_like(finite)
    for p, s in zip(params, states, strict=True):
        if "momentum_buffer" not in s:
            s["momentum_buffer"] = torch.zeros_like(p)
            s["started"] = shared


def _started(states: list[dict[str, Any]], finite: torch.Tensor) -> None:
    """SGD's jobs whose gradients are finite marked as started, each shared flag once."""
    for flag in _distinct(states, "started"):
        flag |= finite


def _counts(
    params: list[torch.Tensor], states: list[dict[str, Any]], finite: torch.Tensor
) -> dict[int, torch.Tensor]:
    """Adam's state started where missing, and each job's step count advanced where its
    gradients are finite. A job skips every parameter's update or none, so the
    parameters share one step count ([K], float32, as torch.optim keeps it), advanced
    once; the distinct counts, by id."""
    shared = torch.zeros(finite.shape[0], dtype=torch.float32, device=finite.device)
    for p, s in zip(params, states, strict=True):
        if "exp_avg" not in s:
            s["exp_avg"] = torch.zeros_like(p)
            s["exp_avg_sq"] = torch.zeros_like(p)
            s["step"] = shared
    counts = _distinct(states, "step")
    for t in counts:
        t.add_(finite.to(t.dtype))
    return {id(t): t for t in counts}


def _distinct(states: list[dict[str, Any]], key: str) -> list[torch.Tensor]:
    """The distinct tensors the states hold under `key` (parameters share one)."""
    return list({id(s[key]): s[key] for s in states}.values())


def _writable(tensors: list[torch.Tensor], every: bool) -> list[torch.Tensor]:
    """Where the update goes: the tensors themselves when every job updates, else
    copies, kept job by job by `_commit`."""
    return tensors if every else [t.clone() for t in tensors]


def _job_sums(grad: torch.Tensor) -> torch.Tensor:
    """The sum of each job's gradient ([K]), in at least single precision, so that a
    half-precision sum does not overflow where the values are finite."""
    wide = None if grad.dtype in (torch.float32, torch.float64) else torch.float32
    return grad.flatten(1).sum(dim=1, dtype=wide)


def _commit(
    targets: list[torch.Tensor], values: list[torch.Tensor], keep: torch.Tensor, every: bool
) -> None:
    """`values` (from `_writable`) into `targets` for the jobs in `keep`; with `every` job
    kept, the values are the targets already."""
    if every:
        return
    for target, value in zip(targets, values, strict=True):
        target.copy_(torch.where(_along(keep, target), value, target))


def _along(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`values` ([K]) shaped to broadcast over `like` ([K, …])."""
    return values.reshape(-1, *([1] * (like.dim() - 1)))
