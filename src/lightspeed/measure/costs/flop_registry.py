"""lightspeed's own FLOP formulas: a registry of pure shape → count functions.

A formula receives the op's arguments bound to their schema names (see
`torch_internals.bind_arguments`) with every tensor replaced by its `torch.Size` (lists
of tensors by lists of sizes), and the op's output converted the same way. It returns
FLOPs as an int. Registering two formulas for one op raises, as in
torch/utils/flop_counter.py, so a formula cannot be replaced by accident.

The formula modules (`flops_activation`, `flops_attention`, `flops_pointwise`,
`flops_pooling`, `flops_reduction`, `flops_rnn`, `flops_sequence`,
`flops_sequence_loss`) register on import; `costs` imports them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch
from torch._ops import OpOverloadPacket

from lightspeed.errors import LightspeedError


class _InstalledAten:
    """`torch.ops.aten` where an op the installed torch lacks reads as None.

    The package supports torch 2.4 and later, and ops come and go between releases
    (`_flash_attention_forward_no_dropout_inplace` is in 2.13, not in 2.11): a formula
    or an op set naming a newer op must not stop the import on an older torch. The
    registries skip such an op; a set holding None matches no op.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.ops.aten, name, None)


aten: Any = _InstalledAten()

ShapeArgs = Mapping[str, Any]
FlopFormula = Callable[[ShapeArgs, Any], int]
_F = TypeVar("_F", bound=FlopFormula)


class FlopRegistrationError(LightspeedError):
    """A FLOP formula was registered twice for the same op (a bug in lightspeed)."""


@dataclasses.dataclass(frozen=True)
class FlopRule:
    """A registered formula; `matmul` marks ops whose FLOPs are 2 × their MACs."""

    formula: FlopFormula
    matmul: bool


_REGISTRY: dict[OpOverloadPacket, FlopRule] = {}


def register_flops(*targets: OpOverloadPacket | None, matmul: bool = False) -> Callable[[_F], _F]:
    """Decorator: count the FLOPs of every overload of `targets` with the decorated formula.

    `matmul=True` declares a matmul-class op (FLOPs = 2 × MACs), so its cost reports MACs.
    A target that is None (an op this torch lacks, read through `aten`) is skipped.
    """

    def register(formula: _F) -> _F:
        for target in targets:
            if target is None:
                continue
            if target in _REGISTRY:
                raise FlopRegistrationError(f"duplicate FLOP formula for {target}")
            _REGISTRY[target] = FlopRule(formula, matmul)
        return formula

    return register


def flop_rule(packet: OpOverloadPacket) -> FlopRule | None:
    """lightspeed's formula for an op, or None when it has none."""
    return _REGISTRY.get(packet)


def registered_packets() -> frozenset[OpOverloadPacket]:
    """Every op lightspeed has its own FLOP formula for."""
    return frozenset(_REGISTRY)


def aten_family(name: str) -> tuple[OpOverloadPacket, ...]:
    """The aten ops named `name`, `name_`, `_foreach_name` and `_foreach_name_` that exist.

    One per-element convention covers an op, its in-place variant, its `out=` overloads
    (overloads of the same packet) and its `_foreach_` list variants.
    """
    names = (name, f"{name}_", f"_foreach_{name}", f"_foreach_{name}_")
    family = tuple(getattr(torch.ops.aten, n) for n in names if hasattr(torch.ops.aten, n))
    if not family:  # a misspelt name would otherwise register nothing, silently
        raise FlopRegistrationError(f"no aten op is named {name!r} or a variant of it")
    return family


def shapes(value: Any) -> Iterator[torch.Size]:
    """Every tensor size in a (possibly nested) list/tuple of converted arguments."""
    if isinstance(value, torch.Size):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from shapes(item)


def numel(shape: torch.Size | tuple[int, ...] | list[int]) -> int:
    """Number of elements of a tensor of size `shape`."""
    return math.prod(shape)


def total_numel(value: Any) -> int:
    """Total number of elements over every tensor size in `value`."""
    return sum(numel(shape) for shape in shapes(value))


def first_output_numel(out: Any) -> int:
    """Elements of the op's first tensor output (a reduction's values, not its indices)."""
    return next((numel(shape) for shape in shapes(out)), 0)


def output_elements(a: ShapeArgs, out: Any) -> int:
    """Elements an elementwise op produces: its outputs, else (in-place `_foreach_`
    ops return nothing) the elements of its `self` list."""
    produced = total_numel(out)
    return produced if produced else total_numel(a.get("self"))


def per_element(flops_per_element: int) -> FlopFormula:
    """A formula counting `flops_per_element` FLOPs for each output element."""

    def formula(a: ShapeArgs, out: Any) -> int:
        return flops_per_element * output_elements(a, out)

    formula.__doc__ = f"{flops_per_element} FLOP(s) per output element."
    return formula


def zero_flops(a: ShapeArgs, out: Any) -> int:
    """0 FLOPs: the op only moves, converts or allocates data."""
    return 0
