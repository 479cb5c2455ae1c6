"""Horizontal fusion of K training jobs of one model into one job (HFTA: Wang, Yang,
Pekhimenko et al., "Horizontally Fused Training Array", MLSys 2021).

Hyper-parameter searches train many copies of one architecture, each too small to fill
the hardware; HFTA runs K of them as one job whose operators take all K at once. Here
the fusion is built for an arbitrary `nn.Module` with `torch.func`: the K copies'
parameters and buffers are stacked on a new first dimension (`stack_module_state`),
and the model runs once under `vmap` over that dimension (`functional_call`), so a
Linear becomes a batched matrix product and a convolution K convolutions in one call.
vmap costs something on every op; an `nn.Sequential` of the layers `layers.direct_plan` knows
runs through layer rewrites on the stacked tensors instead (HFTA's: a Linear as one
`baddbmm`, a BatchNorm over K × C channels). The loss of a mean (or a sum) over samples
takes the K jobs' batches as one batch (`FusedModel.loss`), once checked against the
jobs' own. The optimizer updates the K parameter sets at once, each with its own
hyper-parameters (`optimizer.FusedOptimizer`).

Equivalence: each job's parameters follow the ones it reaches alone, to rounding (the
batched kernels sum in another order): the fused loss is the sum of the K jobs' losses,
whose gradient with respect to job k's parameters is job k's own gradient.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from lightspeed.errors import ConfigError
from lightspeed.optimize.fusion.layers import Layer, SeededDropout, direct_plan, seeded_dropout
from lightspeed.optimize.fusion.optimizer import HYPERPARAMETERS, FusedOptimizer, check_hparams
from lightspeed.workload import Workload

__all__ = [
    "FusedModel",
    "SeededDropout",
    "build_job",
    "drop_jobs",
    "fuse",
    "job_optimizer",
    "lone_optimizer",
    "optimizer_hparams",
    "seeded_dropout",
    "shared",
]


class FusedModel(nn.Module):
    """K copies of one architecture as one module: every parameter and buffer of the
    copies stacked on a first dimension of size K (`k`). `forward(*args)` takes each
    argument with that dimension first (job k's input at index k) and returns the K
    outputs stacked the same way; `job(k)` is job k's own module, with its current
    weights."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if len(models) < 1:
            raise ConfigError("fuse: K must be at least 1 job.")
        kinds = {type(m) for m in models}
        if len(kinds) != 1:
            raise ConfigError("fuse: the K models must share one architecture (one class).")
        self.k = len(models)
        params, buffers = stack_module_state(list(models))
        # The architecture without weights: functional_call supplies them.
        self._base = [_on_meta(models[0])]
        self._names = list(params)
        self._buffer_names = list(buffers)
        # A Linear's weight is kept transposed ([K, in, out]) and handed to the
        # architecture as a view: under vmap its gradient arrives in that layout, which
        # autograd then takes as it is rather than copying it, transposed, into the
        # parameter at every backward pass; the optimizer's elementwise work stays on
        # contiguous tensors.
        # Each further name of a tied tensor, and the name it is stacked under.
        self._aliases = _aliases(self.base)
        tied = set(self._aliases) | set(self._aliases.values())
        self._transposed = (_linear_weights(self.base) - tied) & set(self._names)
        self._watched = False
        # How the loss is taken: undecided (None), the loss function and its factor once
        # the first call has checked that folding holds, or it and 0 where it does not.
        self._folding: tuple[Callable[..., Any], float] | None = None
        self._plan = direct_plan(self.base, "")
        # In a list: a module held as an attribute would become a submodule.
        self._folded_view = [_Folded(self)]
        for i, name in enumerate(self._names):
            data = params[name].detach()
            if name in self._transposed:
                data = data.mT.contiguous()
            self.register_parameter(f"p{i}", nn.Parameter(data))
        for i, name in enumerate(self._buffer_names):
            self.register_buffer(f"b{i}", buffers[name].detach().clone())

    @property
    def base(self) -> nn.Module:
        return self._base[0]

    def stacked(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The stacked parameters and buffers by their names in one copy."""
        params = {
            n: getattr(self, f"p{i}").mT if n in self._transposed else getattr(self, f"p{i}")
            for i, n in enumerate(self._names)
        }
        buffers = {n: getattr(self, f"b{i}") for i, n in enumerate(self._buffer_names)}
        return params, buffers

    def per_job(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(model, *args)` for every job at once: `model` is job k's module (a stand-in
        calling the architecture with job k's weights), each of `args` job k's slice."""
        base = self.base
        training = self.training

        aliases = self._aliases

        def one(params: dict[str, Any], buffers: dict[str, Any], *job_args: Any) -> Any:
            return fn(_Bound(base, _by_every_name(params, buffers, aliases), training), *job_args)

        if base.training != training:
            base.train(training)
        params, buffers = self.stacked()
        run = vmap(one, randomness="different")
        if self._watched:
            return run(params, buffers, *args)
        # PyTorch says once a process, as a Python warning, which ops vmap runs one job at
        # a time; the first call turns that into a line of the report.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = run(params, buffers, *args)
        self._watched = True
        report_fallbacks(caught)
        return found

    @property
    def direct(self) -> bool:
        """Whether `forward` runs the jobs' stacked tensors through layer rewrites (a
        Linear as one batched matrix product, …) rather than under vmap: the architecture
        is an `nn.Sequential` of the layers `layers.direct_plan` knows."""
        return self._plan is not None

    @property
    def folded(self) -> bool | None:
        """Whether `loss` takes the K jobs' batches as one batch (see `loss`); None until
        its first call with gradients on has checked it."""
        return None if self._folding is None else self._folding[1] > 0

    def forward(self, *args: Any) -> Any:
        if self._plan is not None and len(args) == 1 and isinstance(args[0], torch.Tensor):
            return self._run_plan(self._plan, args[0])
        return self.per_job(lambda model, *a: model(*a), *args)

    def _run_plan(self, plan: Sequence[Layer], x: torch.Tensor) -> torch.Tensor:
        weights = _by_every_name(*self.stacked(), self._aliases)
        for layer in plan:
            x = layer(x, weights, self.training)
        return x

    def loss(self, fn: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
        """The sum over the K jobs of `fn(model, *args)` (each job's loss, with `model`
        and `args` job k's, as `per_job` gives them): the fused step's loss, whose
        gradient with respect to job k's parameters is job k's own.

        Most losses are a mean (or a sum) over samples of terms that each depend on one
        sample; such a loss of the K jobs' batches taken as one batch of K × B samples,
        through `forward`, is the mean (or the sum) of the jobs' losses, and runs without
        vmap's per-op cost (cross-entropy under vmap is PyTorch's Python decomposition).
        The first call with gradients on checks it: the folded loss against the jobs'
        losses, and each job's gradient from it against the job's own (relative by norm,
        within the square root of the dtype's epsilon), from the same random state and
        buffers; where they differ or folding fails, the loss stays per job. `fn` is
        checked once, so it should be the same function at every call."""
        decided = self._folding
        # ==, not `is`: a bound method is made anew at every attribute access.
        if decided is not None and decided[0] == fn:
            factor = decided[1]
            if factor > 0:
                return fn(self._as_one_batch(), *_map_tensors(args, _fold)) * factor
            return self.per_job(fn, *args).sum()
        params = [p for p in self.parameters() if p.requires_grad]
        if not torch.is_grad_enabled() or not params:
            return self.per_job(fn, *args).sum()
        return self._decide(fn, args, params)

    def _as_one_batch(self) -> _Folded:
        """The model as `loss` hands it to a folded loss, in this model's train mode."""
        view = self._folded_view[0]
        view.training = self.training
        return view

    def _decide(
        self, fn: Callable[..., torch.Tensor], args: tuple[Any, ...], params: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """`loss`'s first call: per job and folded from one random state and the same
        buffers, folding kept where the two agree (see `loss`)."""
        buffers = [b.detach().clone() for b in self.buffers()]
        start = _random_state(params[0].device)

        def rewind() -> None:
            with torch.no_grad():
                for b, saved in zip(self.buffers(), buffers, strict=True):
                    b.copy_(saved)
            _set_random_state(params[0].device, start)

        losses = self.per_job(fn, *args)
        if not bool(torch.isfinite(losses).all()):
            # Nothing to compare against: the next call checks again.
            return losses.sum()
        reference = torch.autograd.grad(losses.sum(), params, allow_unused=True)
        rewind()
        factor = 0.0
        try:
            folded = fn(self._as_one_batch(), *_map_tensors(args, _fold))
            found = torch.autograd.grad(folded, params, retain_graph=True, allow_unused=True)
            factor = _fold_factor(folded.detach(), losses.detach(), self.k)
            if factor > 0 and not _same_per_job(found, reference, factor):
                factor = 0.0
        except Exception as exc:
            # Folding is an optimisation: whatever it breaks, the loss per job stands.
            logging.getLogger("lightspeed").debug("fusion: the loss does not fold: %s", exc)
        self._folding = (fn, factor)
        if factor > 0:
            return folded * factor
        rewind()
        return self.per_job(fn, *args).sum()

    def job(self, k: int) -> nn.Module:
        """Job `k` as an ordinary module of the architecture, with its current weights."""
        weights = self.job_state_dict(k)
        device = next(iter(weights.values())).device if weights else torch.device("cpu")
        module = _tied_copy(self.base, lambda m: m.to_empty(device=device))
        module.load_state_dict(weights)
        return module.train(self.training)

    def job_state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Job `k`'s parameters and buffers, as the architecture's `state_dict` names them."""
        if not 0 <= k < self.k:
            raise ConfigError(f"fuse: job {k} is not one of the {self.k} jobs (0–{self.k - 1}).")
        params, buffers = self.stacked()
        stacked = {**params, **buffers}
        # Every name the architecture's state_dict has, a tied one included (the
        # stacked weights name each tensor once).
        found: dict[str, torch.Tensor] = {}
        for name in self.base.state_dict():
            source = stacked[self._aliases.get(name, name)]
            found[name] = source[k].detach().clone(memory_format=torch.contiguous_format)
        return found


_FALLBACK = re.compile(r"not yet implemented the batching rule for (\S+?)\.")
_FALLBACK_WARNING = (
    "There is a performance drop because we have not yet implemented the batching rule"
)


def report_fallbacks(caught: Sequence[warnings.WarningMessage]) -> list[str]:
    """The ops PyTorch's warnings in `caught` say vmap has no batching rule for, each
    logged once as a lightspeed warning (the fused jobs run it one job at a time); every
    other warning is issued again as it was."""
    ops: list[str] = []
    for record in caught:
        match = _FALLBACK.search(str(record.message))
        if match is None:
            warnings.warn_explicit(record.message, record.category, record.filename, record.lineno)
            continue
        if match.group(1) in ops:  # warned at every call: a model's every attention layer
            continue
        ops.append(match.group(1))
        # Said once here; PyTorch would say it again, raw, at the next call.
        warnings.filterwarnings("ignore", message=_FALLBACK_WARNING, category=record.category)
        logging.getLogger("lightspeed").warning(
            "fusion: PyTorch has no batching rule for %s under vmap, so the fused jobs run"
            " it one job at a time; it gains nothing from fusion",
            match.group(1),
        )
    return ops


def job_optimizer(
    model: FusedModel, optimizer: FusedOptimizer, k: int, module: nn.Module
) -> torch.optim.Optimizer:
    """Job `k`'s optimizer taken out of the fusion: PyTorch's own optimizer for `module`
    (job k's module, `model.job(k)`), with job k's hyper-parameters and its state (step
    counts, moments, momentum buffer) as the fused optimizer holds them, so the job goes
    on alone as it would have fused. Its `state_dict()` is the job's ordinary one."""
    if not 0 <= k < model.k:
        raise ConfigError(f"fuse: job {k} is not one of the {model.k} jobs (0–{model.k - 1}).")
    hparams = optimizer.job_hparams(k)
    lone = lone_optimizer(
        optimizer.algorithm, module.parameters(), hparams, nesterov=optimizer.nesterov
    )
    targets = dict(module.named_parameters())
    for i, name in enumerate(model._names):
        state = optimizer.state.get(getattr(model, f"p{i}"))
        if not state or name not in targets:
            continue
        found: dict[str, Any] = {}
        for key, value in state.items():
            if key == "started" or not isinstance(value, torch.Tensor):
                continue
            if key == "step":
                found["step"] = value[k].detach().clone().to(torch.float32)
                continue
            job = value[k].detach()
            if name in model._transposed:
                job = job.mT
            found[key] = job.clone(memory_format=torch.contiguous_format)
        if "momentum_buffer" in found and (
            hparams["momentum"] == 0 or not bool(state["started"][k])
        ):
            # torch's SGD keeps no buffer without momentum, and starts it at the first
            # gradient where the job has not stepped yet.
            found["momentum_buffer"] = None
        lone.state[targets[name]] = found
    return lone


def _by_every_name(
    params: Mapping[str, Any], buffers: Mapping[str, Any], aliases: Mapping[str, str]
) -> dict[str, Any]:
    """Parameters and buffers under every name a tied tensor goes by (`aliases`), so that
    functional_call and the layer rewrites need not tie them."""
    weights = {**params, **buffers}
    weights.update((alias, weights[name]) for alias, name in aliases.items())
    return weights


def _aliases(model: nn.Module) -> dict[str, str]:
    """Every name of a parameter or buffer that another name of `model` also holds,
    mapped to the first of its names (the one `stack_module_state` keeps)."""
    first: dict[int, str] = {}
    found: dict[str, str] = {}
    named = [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]
    for name, tensor in named:
        canonical = first.setdefault(id(tensor), name)
        if canonical != name:
            found[name] = canonical
    return found


def _linear_weights(model: nn.Module) -> set[str]:
    """The names of the `nn.Linear` weights of `model`."""
    return {
        f"{prefix}.weight" if prefix else "weight"
        for prefix, module in model.named_modules()
        if isinstance(module, nn.Linear)
    }


def drop_jobs(
    model: FusedModel, optimizer: FusedOptimizer, jobs: Sequence[int]
) -> tuple[FusedModel, FusedOptimizer]:
    """`model` and `optimizer` without `jobs` (finished or diverged): the others keep
    their weights, buffers, hyper-parameters, optimizer state and step counts, and go on
    as they would have."""
    gone = set(jobs)
    if not gone <= set(range(model.k)):
        raise ConfigError(f"fuse: jobs {sorted(gone)} are not all among 0–{model.k - 1}.")
    kept = [j for j in range(model.k) if j not in gone]
    if not kept:
        raise ConfigError("fuse: dropping every job leaves nothing to train.")
    smaller = FusedModel([model.job(j) for j in kept])
    index = torch.tensor(kept)
    hparams = [optimizer.job_hparams(j) for j in kept]
    resized = FusedOptimizer(
        smaller.parameters(), optimizer.algorithm, hparams, nesterov=optimizer.nesterov
    )
    # A tensor parameters share (Adam's step counts) stays shared.
    taken: dict[int, torch.Tensor] = {}

    def select(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            return value
        if id(value) not in taken:
            taken[id(value)] = value.index_select(0, index.to(value.device))
        return taken[id(value)]

    for old, new in zip(model.parameters(), smaller.parameters(), strict=True):
        state = optimizer.state.get(old)
        if state:
            resized.state[new] = {key: select(value) for key, value in state.items()}
    resized.skipped = optimizer.skipped.index_select(0, index)
    return smaller.train(model.training), resized


class _Bound(nn.Module):
    """The architecture called with one job's weights, where the workload's loss expects
    its model; under vmap the weights are that job's slices."""

    def __init__(self, base: nn.Module, weights: dict[str, Any], training: bool) -> None:
        super().__init__()
        self._call = (base, weights)
        self.training = training

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        base, weights = self._call
        return functional_call(base, weights, args, kwargs, tie_weights=False)

    def __getattr__(self, name: str) -> Any:
        # Submodules a loss reaches by name (model.head) are the architecture's, unbound.
        return getattr(self.__dict__["_call"][0], name)


class _Folded(nn.Module):
    """The fused model where a loss expects one job's: it takes the K jobs' inputs as
    one batch of K × B samples (job k's at [k·B, (k+1)·B)), and returns its outputs so."""

    def __init__(self, fused: FusedModel) -> None:
        super().__init__()
        self._fused = [fused]
        self.training = fused.training

    def forward(self, *args: Any) -> Any:
        fused = self._fused[0]
        found = fused(*_map_tensors(args, lambda t: t.unflatten(0, (fused.k, -1))))
        return _map_tensors(found, _fold)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_fused"][0].base, name)


def _fold(t: torch.Tensor) -> torch.Tensor:
    """`[K, B, …]` as `[K·B, …]`."""
    if t.dim() < 2:
        raise ConfigError("fuse: a tensor without a batch dimension does not fold.")
    return t.flatten(0, 1)


def _fold_factor(folded: torch.Tensor, losses: torch.Tensor, k: int) -> float:
    """K where the folded loss is the mean of the jobs' `losses`, 1 where it is their
    sum, 0 where it is neither."""
    if folded.dim() != 0:
        return 0.0
    total = losses.sum()
    tolerance = _tolerance(total.dtype) * float(losses.abs().sum())
    for factor in (float(k), 1.0):
        if abs(float(folded) * factor - float(total)) <= tolerance:
            return factor
    return 0.0


def _same_per_job(
    found: Sequence[torch.Tensor | None], reference: Sequence[torch.Tensor | None], factor: float
) -> bool:
    """Whether each job's gradient (`found` × `factor`) equals its own (`reference`),
    relative by norm over all of the job's parameters."""
    difference: torch.Tensor | float = 0.0
    size: torch.Tensor | float = 0.0
    dtype = torch.float32
    for got, want in zip(found, reference, strict=True):
        if got is None and want is None:
            continue
        like = got if got is not None else want
        assert like is not None
        dtype = like.dtype
        got = torch.zeros_like(like) if got is None else got * factor
        want = torch.zeros_like(like) if want is None else want
        jobs = want.shape[0]
        difference = difference + (got - want).reshape(jobs, -1).double().pow(2).sum(1)
        size = size + want.reshape(jobs, -1).double().pow(2).sum(1)
    bound = _tolerance(dtype) * torch.as_tensor(size).sqrt()
    return bool((torch.as_tensor(difference).sqrt() <= bound).all())


def _tolerance(dtype: torch.dtype) -> float:
    """Folded and per-job sums differ by rounding: the square root of `dtype`'s epsilon."""
    return float(torch.finfo(dtype).eps) ** 0.5 if dtype.is_floating_point else 1e-6


def _random_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    on_device = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), on_device


def _set_random_state(
    device: torch.device, state: tuple[torch.Tensor, torch.Tensor | None]
) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _on_meta(model: nn.Module) -> nn.Module:
    """A copy of `model` on the meta device, its ties kept (see `_tied_copy`)."""
    return _tied_copy(model, lambda m: m.to("meta"))


def _tied_copy(model: nn.Module, move: Callable[[nn.Module], nn.Module]) -> nn.Module:
    """A copy of `model` moved by `move`, its tied parameters and buffers still tied:
    `Module.to` and `to_empty` make each module its own new tensor, which would leave a
    tied weight (GPT-2's output head) out of what functional_call supplies, and train
    it apart in a job taken out of the fusion."""
    base = copy.deepcopy(model)
    places: dict[int, list[tuple[nn.Module, str, str]]] = {}
    for module in base.modules():
        for kind in ("_parameters", "_buffers"):
            for name, tensor in getattr(module, kind).items():
                if tensor is not None:
                    places.setdefault(id(tensor), []).append((module, kind, name))
    move(base)
    for tied in places.values():
        first_module, first_kind, first_name = tied[0]
        shared = getattr(first_module, first_kind)[first_name]
        for module, kind, name in tied[1:]:
            getattr(module, kind)[name] = shared
    return base


def build_job(workload: Workload, seed: int) -> nn.Module:
    """One job's model as `fuse` builds each: `workload.model()` initialised from torch's
    generator seeded with `seed`, its `nn.Dropout`s seeded from the same generator; the
    job it builds trains alike alone and fused."""
    torch.manual_seed(seed)
    model = workload.model()
    seeded_dropout(model, int(torch.randint(0, 2**62, ())))
    return model


def lone_optimizer(
    algorithm: str,
    params: Any,
    hparams: Mapping[str, float],
    *,
    nesterov: bool = False,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    """PyTorch's own optimizer for one job of a fused set: `algorithm` ("sgd", "adam",
    "adamw") with `hparams` named as `FusedOptimizer`'s (beta1 and beta2 become betas);
    `fused` as torch.optim takes it (True: its fused kernel)."""
    check_hparams(algorithm, [hparams])
    h = {**HYPERPARAMETERS[algorithm], **hparams}
    if algorithm == "sgd":
        return torch.optim.SGD(
            params,
            lr=h["lr"],
            momentum=h["momentum"],
            dampening=h["dampening"],
            weight_decay=h["weight_decay"],
            nesterov=nesterov,
            fused=fused,
        )
    kind = torch.optim.Adam if algorithm == "adam" else torch.optim.AdamW
    return kind(
        params,
        lr=h["lr"],
        betas=(h["beta1"], h["beta2"]),
        eps=h["eps"],
        weight_decay=h["weight_decay"],
        fused=fused,
    )


def optimizer_hparams(workload: Workload) -> tuple[str, dict[str, float], bool]:
    """The algorithm ("sgd", "adam", "adamw") and hyper-parameters of the optimizer
    `workload` builds, read from it built on one parameter; nesterov for SGD."""
    probe = nn.Parameter(torch.zeros(1))
    optimizer = workload.optimizer([probe])
    group = optimizer.param_groups[0]
    kind = type(optimizer).__name__.lower()
    if kind not in HYPERPARAMETERS:
        raise ConfigError(
            f"fuse: {type(optimizer).__name__} has no fused form; the fused optimizers are"
            " SGD, Adam and AdamW."
        )
    found: dict[str, float] = {}
    for name in HYPERPARAMETERS[kind]:
        if name in ("beta1", "beta2"):
            found[name] = float(group["betas"][0 if name == "beta1" else 1])
        else:
            found[name] = float(group[name])
    return kind, found, bool(group.get("nesterov", False))


def fuse(
    workload: Workload,
    k: int,
    *,
    hparams: Sequence[Mapping[str, float]] | None = None,
    shared_batch: bool = False,
) -> Workload:
    """`workload`'s K jobs as one fused job, named `"<name>+fuse<K>"` (see the module's
    docstring).

    The K models are built one after another by `workload.model()`, so each is
    initialised independently, as K separate jobs would be. `hparams[k]` overrides job
    k's optimizer hyper-parameters (`lr`, `weight_decay`, `momentum`, `beta1`, `beta2`,
    …); the algorithm and the rest are those of `workload.optimizer` (SGD, Adam or
    AdamW). A batch is K batches, one a job (`workload.batch` called K times), or, with
    `shared_batch`, one batch every job trains on. The step's loss is the sum of the K
    jobs' losses.

    Preconditions: the model and the loss run under `torch.func.vmap` (no `.item()`, no
    data-dependent control flow, no in-place change of an input); the workload has no
    step of its own. Each `nn.Dropout` becomes a `SeededDropout` with a seed of the
    job's own, so every job draws its own masks, and `job(k)` alone draws the same ones;
    other random ops draw from torch's generator, differently per job (vmap's randomness
    "different").
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"fuse: k={k!r} must be a whole number of jobs, at least 1.")
    if workload.step is not None:
        raise ConfigError(
            f"fuse: workload {workload.name!r} writes its own step; fusion needs one loss"
            " and one optimizer."
        )
    jobs = list(hparams) if hparams is not None else [{} for _ in range(k)]
    if len(jobs) != k:
        raise ConfigError(f"fuse: {len(jobs)} sets of hyper-parameters for {k} jobs.")
    algorithm, defaults, nesterov = optimizer_hparams(workload)
    check_hparams(algorithm, jobs)

    def model() -> nn.Module:
        models = [workload.model() for _ in range(k)]
        for built in models:
            # A seed a job from torch's generator, as each job's own run would draw.
            seeded_dropout(built, int(torch.randint(0, 2**62, ())))
        return FusedModel(models)

    def batch(n: int) -> Any:
        if shared_batch:
            return shared(workload.batch(n), k)
        return _stack([workload.batch(n) for _ in range(k)])

    def loss(fused: nn.Module, batch: Any) -> torch.Tensor:
        assert isinstance(fused, FusedModel)
        return fused.loss(workload.loss, batch)

    def optimizer(params: Any) -> torch.optim.Optimizer:
        return FusedOptimizer(params, algorithm, jobs, defaults=defaults, nesterov=nesterov)

    return dataclasses.replace(
        workload,
        name=f"{workload.name}+fuse{k}",
        jobs=workload.jobs * k,
        model=model,
        batch=batch,
        loss=loss,
        optimizer=optimizer,
        loader=None,
    )


def shared(batch: Any, k: int) -> Any:
    """One batch as K jobs' batches, every job training on it (expanded, not copied)."""
    return _map_tensors(batch, lambda t: t.unsqueeze(0).expand(k, *t.shape))


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {key: _map_tensors(v, fn) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_map_tensors(v, fn) for v in value)
    return value


def _stack(batches: list[Any]) -> Any:
    """K batches of one structure as one, every tensor stacked on a new first dimension."""
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(batches)
    if isinstance(first, dict):
        return {key: _stack([b[key] for b in batches]) for key in first}
    if isinstance(first, list | tuple):
        return type(first)(_stack([b[i] for b in batches]) for i in range(len(first)))
    raise ConfigError(
        f"fuse: a batch holds {type(first).__name__}, which cannot be stacked for K jobs;"
        " batches are tensors, or tuples, lists and dicts of them."
    )
