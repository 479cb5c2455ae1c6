"""The cost of one aten op call: FLOPs, MACs and bytes moved → `OpCost`.

`op_cost(func, args, kwargs, out)` is what an op-capturing `TorchDispatchMode` calls for
every op. Conventions:

- FLOPs = 2 × MACs for matmul-class ops (mm, addmm, bmm, baddbmm, convolution and its
  backward, attention, mv, dot, fused recurrent layers), whose `OpCost.macs` is set;
  other ops have `macs=None`. Their formulas are torch.utils.flop_counter's where it has
  one, lightspeed's own (`flops_attention`, `flops_rnn`) where it misses one (the CPU
  attention kernels and the oneDNN and cuDNN LSTM among them).
- Attention counts QKᵀ and P·V in full, with no causal discount: 4·B·H·Lq·Lk·D forward,
  10·B·H·Lq·Lk·D backward. `attention_causal(func, args, kwargs)` says when a causal
  mask makes about half of that work skippable, so a caller can show both figures.
- Other ops count a documented number of FLOPs per element: one per arithmetic
  operation, comparison or special function (`flops_pointwise`, `flops_reduction`).
- Views, aliases and metadata changes (view, t, expand, slice, detach, lift_fresh…) cost
  0 FLOPs and 0 bytes. Copies (`_to_copy`, `clone`) cost bytes, 0 FLOPs.
- An op with no formula costs 0 FLOPs with `flops_known=False`; its bytes still count.
- Bytes follow `bytes_moved`: unique storages, read-modify-write operands both ways.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch._ops import OpOverload

# The formula modules register their formulas on import.
from lightspeed.measure.costs import (
    flops_activation,
    flops_pointwise,
    flops_pooling,
    flops_reduction,
    flops_rnn,
    flops_sequence,
    flops_sequence_loss,
)
from lightspeed.measure.costs.bytes_moved import bytes_moved
from lightspeed.measure.costs.flop_registry import flop_rule
from lightspeed.measure.costs.flops_attention import attention_causal
from lightspeed.workload.torch_internals import bind_arguments, is_view, torch_flop_formula

__all__ = ["OpCost", "attention_causal", "is_metadata_only", "known_flops", "op_cost"]

log = logging.getLogger(__name__)

# Imported for their registrations only.
del flops_activation, flops_pointwise, flops_pooling, flops_reduction, flops_rnn
del flops_sequence, flops_sequence_loss


@dataclasses.dataclass(frozen=True)
class OpCost:
    """Work and traffic of one op call, or the sum of several (costs add with `+`).

    flops: floating-point operations (a multiply-accumulate counts 2).
    macs: multiply-accumulates of the matmul-class work in it; None when it has none.
    bytes_read / bytes_written: bytes of memory read and written (unique storages).
    flops_known: False when some op in it had no FLOP formula (its FLOPs counted as 0).
    """

    flops: int
    macs: int | None
    bytes_read: int
    bytes_written: int
    flops_known: bool = True

    def __post_init__(self) -> None:
        counts = (self.flops, self.macs or 0, self.bytes_read, self.bytes_written)
        if min(counts) < 0:
            raise ValueError(f"an OpCost cannot be negative: {self}")

    @classmethod
    def zero(cls) -> OpCost:
        """The cost of doing nothing: the identity of `+`."""
        return cls(flops=0, macs=None, bytes_read=0, bytes_written=0)

    @property
    def bytes(self) -> int:
        """Bytes moved: read + written."""
        return self.bytes_read + self.bytes_written

    def __add__(self, other: OpCost) -> OpCost:
        if not isinstance(other, OpCost):
            return NotImplemented
        macs = (
            None
            if self.macs is None and other.macs is None
            else (self.macs or 0) + (other.macs or 0)
        )
        return OpCost(
            flops=self.flops + other.flops,
            macs=macs,
            bytes_read=self.bytes_read + other.bytes_read,
            bytes_written=self.bytes_written + other.bytes_written,
            flops_known=self.flops_known and other.flops_known,
        )


_UNTRACKED_VIEWS = frozenset(
    (
        torch.ops.aten._unsafe_view,
        torch.ops.aten.unsafe_split,
        torch.ops.aten.unsafe_split_with_sizes,
    )
)


@functools.cache  # called for every op of a step; the answer depends on the op alone
def is_metadata_only(func: OpOverload) -> bool:
    """Whether the op only makes a view, changes tensor metadata or marks a profiler range
    (no data touched)."""
    if torch.Tag.inplace_view in func.tags:  # t_, unsqueeze_, as_strided_, set_, resize_…
        return True
    if func.namespace == "profiler":  # record_function's enter/exit markers (Optimizer.step)
        return True
    # _unsafe_view and unsafe_split (an RNN cell's gate chunks) return views that autograd
    # does not track, so their schemas have no alias mark.
    return is_view(func) or func.overloadpacket in _UNTRACKED_VIEWS


def known_flops(func: OpOverload) -> bool:
    """Whether lightspeed has a FLOP count for the op (a formula, or 0 for a view)."""
    packet = func.overloadpacket
    return (
        is_metadata_only(func)
        or torch_flop_formula(packet) is not None
        or flop_rule(packet) is not None
    )


def op_cost(func: OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any) -> OpCost:
    """The cost of one call `out = func(*args, **kwargs)` of an aten op."""
    if is_metadata_only(func):
        return OpCost.zero()
    bound = bind_arguments(func, args, kwargs)
    bytes_read, bytes_written = bytes_moved(func, bound, out)
    flops, macs, flops_known = _flops(func, args, kwargs, bound, out)
    return OpCost(flops, macs, bytes_read, bytes_written, flops_known)


def _flops(
    func: OpOverload,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Mapping[str, Any],
    out: Any,
) -> tuple[int, int | None, bool]:
    """(FLOPs, MACs or None, known) of one call."""
    packet = func.overloadpacket
    try:
        torch_formula = torch_flop_formula(packet)
        if torch_formula is not None:
            # Every formula in torch's registry is matmul-class, counting 2 per MAC.
            flops = int(torch_formula(*args, **kwargs, out_val=out))
            return flops, flops // 2, True
        rule = flop_rule(packet)
        if rule is None:
            return 0, None, False
        flops = int(rule.formula(_to_shapes(dict(bound)), _to_shapes(out)))
        return flops, (flops // 2 if rule.matmul else None), True
    except Exception:
        # A cost formula must never break the user's training step: report the op's
        # FLOPs as unknown and say why in the log.
        log.warning("FLOP formula for %s failed; its FLOPs are unknown", func, exc_info=True)
        return 0, None, False


def _to_shapes(value: Any) -> Any:
    """The value with every tensor replaced by its size, through dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return value.shape
    if isinstance(value, dict):
        return {key: _to_shapes(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_to_shapes(item) for item in value]
    if isinstance(value, tuple) and not isinstance(value, torch.Size):
        return tuple(_to_shapes(item) for item in value)  # torch.return_types become tuples
    return value
