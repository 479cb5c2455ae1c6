"""Optimizers that update K jobs' parameters at once, each job with its own
hyper-parameters: the optimizer half of horizontal fusion (`optimize.fusion`).

Every parameter holds K jobs stacked on its first dimension; every hyper-parameter is a
`[K]` tensor, broadcast over the rest. The updates are PyTorch's own algorithms as
`torch.optim.SGD`, `Adam` and `AdamW` document them (the single-tensor path, in the
same order of operations), so that each job's parameters follow the ones the job
would reach alone with PyTorch's optimizer, to rounding.

A job whose gradients hold an inf or a NaN skips its update (its parameters, moments
and step count stay as they were), so one diverging job does not poison the others;
`skipped` counts each job's skipped steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from lightspeed.errors import ConfigError

__all__ = ["HYPERPARAMETERS", "FusedOptimizer", "check_hparams"]

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
    PyTorch's defaults, or `defaults`). `nesterov` as SGD's, for every job."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        algorithm: str,
        hparams: Sequence[Mapping[str, float]],
        *,
        defaults: Mapping[str, float] | None = None,
        nesterov: bool = False,
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
        finite = torch.ones(self.k, dtype=torch.bool, device=params[0].device)
        for p in params:
            assert p.grad is not None
            finite &= torch.isfinite(p.grad).flatten(1).all(dim=1)
        self.skipped += (~finite).to(self.skipped.device, torch.int64)
        for p in params:
            self._update(p, finite)
        return loss

    def _update(self, p: torch.nn.Parameter, finite: torch.Tensor) -> None:
        assert p.grad is not None
        h = {name: _along(v, p) for name, v in self.hparams.items()}
        keep = _along(finite, p)
        state = self.state[p]
        if self.algorithm == "sgd":
            self._sgd(p, p.grad, state, h, keep)
        else:
            self._adam(p, p.grad, state, h, keep)

    def _sgd(
        self,
        p: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, Any],
        h: Mapping[str, torch.Tensor],
        keep: torch.Tensor,
    ) -> None:
        grad = grad + h["weight_decay"] * p
        if "momentum_buffer" not in state:
            # PyTorch starts the buffer at the first gradient, undamped; a job that
            # skipped its first step starts it at its first finite one.
            state["momentum_buffer"] = torch.zeros_like(p)
            state["started"] = torch.zeros_like(keep)
        buf = state["momentum_buffer"]
        started = state["started"]
        moved = torch.where(started, h["momentum"] * buf + (1 - h["dampening"]) * grad, grad)
        buf.copy_(torch.where(keep, moved, buf))
        started |= keep
        direction = grad + h["momentum"] * buf if self.nesterov else buf
        # Without momentum PyTorch steps along the gradient itself.
        direction = torch.where(h["momentum"] != 0, direction, grad)
        p.copy_(torch.where(keep, p - h["lr"] * direction, p))

    def _adam(
        self,
        p: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, Any],
        h: Mapping[str, torch.Tensor],
        keep: torch.Tensor,
    ) -> None:
        if "exp_avg" not in state:
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] = torch.zeros_like(h["lr"])
        m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
        t.copy_(torch.where(keep, t + 1, t))
        if self.algorithm == "adamw":
            decayed = p * (1 - h["lr"] * h["weight_decay"])
        else:
            decayed = p
            grad = grad + h["weight_decay"] * p
        m.copy_(torch.where(keep, m.lerp(grad, 1 - h["beta1"]), m))
        v.copy_(torch.where(keep, v * h["beta2"] + (1 - h["beta2"]) * grad * grad, v))
        bias1 = 1 - h["beta1"] ** t
        bias2 = 1 - h["beta2"] ** t
        step_size = h["lr"] / bias1
        denom = v.sqrt() / bias2.sqrt() + h["eps"]
        p.copy_(torch.where(keep, decayed - step_size * m / denom, p))


def _along(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`values` ([K]) shaped to broadcast over `like` ([K, …])."""
    return values.reshape(-1, *([1] * (like.dim() - 1)))
