"""Layers of K fused jobs (`optimize.fusion`): dropout whose masks are a function of a
seed (each job draws its own, the same fused or alone), and the rewrites that run an
`nn.Sequential` of common layers on the K jobs' stacked tensors without vmap, as HFTA
rewrote its models by hand: a Linear as one batched matrix product, a BatchNorm over
K × C channels with each job's statistics its own."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import torch
from torch import nn

from lightspeed.errors import ConfigError

__all__ = ["Layer", "SeededDropout", "direct_plan", "seeded_dropout"]

# splitmix64's constants (Steele, Lea and Flood 2014), as signed 64-bit integers.
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


class SeededDropout(nn.Module):
    """Dropout whose mask is a function of a seed, a count of its calls and each
    element's position (a counter-based generator: splitmix64's mixing of the three),
    not of torch's global generator. Under `vmap` every job draws from its own seed, and
    the same module outside it (the job alone, `FusedModel.job(k)`) draws the very same
    masks. `seed` and `calls` are buffers, so a job's state_dict carries them."""

    def __init__(self, p: float, seed: int) -> None:
        super().__init__()
        if not 0 <= p < 1:
            raise ConfigError(f"SeededDropout: p={p} must be in [0, 1).")
        self.p = p
        self.seed: torch.Tensor
        self.calls: torch.Tensor
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.int64))
        self.register_buffer("calls", torch.tensor(0, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return _seeded_drop(x, self.seed, self.calls, self.p)


def _seeded_drop(
    x: torch.Tensor, seed: torch.Tensor, calls: torch.Tensor, p: float
) -> torch.Tensor:
    """`x` with `SeededDropout`'s mask applied and `calls` advanced. `seed` and `calls`
    are one job's (0-d) or K jobs' (`[K]`, `x` then `[K, …]`, each job's element
    positions counted within its own slice, so job k draws what it draws alone)."""
    jobs = seed.dim()
    shape = x.shape[jobs:]
    position = torch.arange(shape.numel(), device=x.device).reshape(shape)
    ones = (1,) * len(shape)
    z = seed.view(*seed.shape, *ones) * _GOLDEN + calls.view(*calls.shape, *ones) * _MIX1
    z = z + position * _GOLDEN
    z = (z ^ _shift(z, 30)) * _MIX1
    z = (z ^ _shift(z, 27)) * _MIX2
    z = z ^ _shift(z, 31)
    uniform = _shift(z, 11).to(torch.float64) / float(1 << 53)
    calls.add_(1)
    keep = (uniform >= p).to(x.dtype)
    return x * keep / (1 - p)


def _shift(z: torch.Tensor, bits: int) -> torch.Tensor:
    """`z` shifted right by `bits` as unsigned 64-bit integers: torch's `>>` on int64
    copies the sign bit in, which would leave the mix's top bit always clear."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def seeded_dropout(model: nn.Module, seed: int) -> int:
    """Every `nn.Dropout` in `model` replaced, in place, by a `SeededDropout` of its
    probability, seeded `seed`, `seed + 1`, … in module order; returns how many."""
    count = 0
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is nn.Dropout:
                setattr(module, child_name, SeededDropout(child.p, seed + count))
                count += 1
    return count


Layer = Callable[[torch.Tensor, Mapping[str, torch.Tensor], bool], torch.Tensor]

# Modules without weights that act on each element, which take the jobs' stacked
# tensors as they are.
_ELEMENTWISE = (
    nn.ReLU,
    nn.ReLU6,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.LeakyReLU,
    nn.ELU,
    nn.Softplus,
    nn.Mish,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Hardtanh,
    nn.Identity,
)


def direct_plan(module: nn.Module, prefix: str) -> list[Layer] | None:
    """`module`'s forward as layers that each take the K jobs' stacked tensors
    (`[K, B, …]`) and the stacked weights by name: an `nn.Sequential` of Linear,
    BatchNorm, LayerNorm, Flatten, `SeededDropout` and elementwise activations, nested or
    not. None for anything else (or a module with hooks): it runs under vmap."""
    if module._forward_hooks or module._forward_pre_hooks:
        return None
    kind = type(module)
    if kind is nn.Sequential:
        plan: list[Layer] = []
        for name, child in module.named_children():
            inner = direct_plan(child, f"{prefix}{name}.")
            if inner is None:
                return None
            plan += inner
        return plan
    if kind is nn.Linear:
        bias = f"{prefix}bias" if module.bias is not None else None
        return [functools.partial(_linear, weight=f"{prefix}weight", bias=bias)]
    if kind in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
        assert isinstance(module, nn.modules.batchnorm._BatchNorm)
        if module.momentum is None:
            return None  # a cumulative average: counted per job, left to vmap
        return [functools.partial(_batch_norm, module=module, prefix=prefix)]
    if kind is nn.LayerNorm:
        assert isinstance(module, nn.LayerNorm)
        return [functools.partial(_layer_norm, module=module, prefix=prefix)]
    if kind is nn.Flatten:
        assert isinstance(module, nn.Flatten)
        start, end = (d + 1 if d >= 0 else d for d in (module.start_dim, module.end_dim))
        return [lambda x, _w, _t: x.flatten(start, end)]
    if kind is SeededDropout:
        assert isinstance(module, SeededDropout)
        p, seed, calls = module.p, f"{prefix}seed", f"{prefix}calls"
        return [
            lambda x, w, training: (
                _seeded_drop(x, w[seed], w[calls], p) if training and p > 0 else x
            )
        ]
    if kind in _ELEMENTWISE:
        return [lambda x, _w, _t: module(x)]
    return None


def _linear(
    x: torch.Tensor,
    weights: Mapping[str, torch.Tensor],
    _training: bool,
    *,
    weight: str,
    bias: str | None,
) -> torch.Tensor:
    """K Linears as one batched matrix product: `[K, …, in]` to `[K, …, out]`."""
    w = weights[weight]
    flat = x.reshape(x.shape[0], -1, x.shape[-1])
    # w.mT is the contiguous [K, in, out] a Linear's weight is stored as (FusedModel).
    if bias is None:
        out = torch.bmm(flat, w.mT)
    else:
        out = torch.baddbmm(weights[bias].unsqueeze(1), flat, w.mT)
    return out.reshape(*x.shape[:-1], w.shape[1])


def _batch_norm(
    x: torch.Tensor,
    weights: Mapping[str, torch.Tensor],
    training: bool,
    *,
    module: nn.modules.batchnorm._BatchNorm,
    prefix: str,
) -> torch.Tensor:
    """K BatchNorms as one over K × C channels, each job's statistics its own (HFTA's
    rewrite): `[K, B, C, …]` taken as `[B, K·C, …]`; the running statistics are the
    stacked buffers, updated in place through views."""
    k, b = x.shape[:2]
    spread = x.transpose(0, 1).reshape(b, -1, *x.shape[3:])

    def flat(name: str) -> torch.Tensor | None:
        found = weights.get(prefix + name)
        return None if found is None else found.view(-1)

    mean, var = flat("running_mean"), flat("running_var")
    if training and module.track_running_stats:
        weights[prefix + "num_batches_tracked"].add_(1)
    out = nn.functional.batch_norm(
        spread,
        mean if not training or module.track_running_stats else None,
        var if not training or module.track_running_stats else None,
        flat("weight"),
        flat("bias"),
        training or (mean is None and var is None),
        module.momentum or 0.0,
        module.eps,
    )
    return out.reshape(b, k, *x.shape[2:]).transpose(0, 1)


def _layer_norm(
    x: torch.Tensor,
    weights: Mapping[str, torch.Tensor],
    _training: bool,
    *,
    module: nn.LayerNorm,
    prefix: str,
) -> torch.Tensor:
    """K LayerNorms: the normalisation is each sample's own; each job's scale and
    shift broadcast over its slice."""
    shape = module.normalized_shape
    out = nn.functional.layer_norm(x, shape, None, None, module.eps)
    spread = (x.shape[0], *(1,) * (x.dim() - 1 - len(shape)), *shape)
    if prefix + "weight" in weights:
        out = out * weights[prefix + "weight"].view(spread)
    if prefix + "bias" in weights:
        out = out + weights[prefix + "bias"].view(spread)
    return out
