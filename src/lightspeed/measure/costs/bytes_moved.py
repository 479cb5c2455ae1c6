"""Bytes an aten op reads and writes: the unique storages it touches.

Rules, in bytes:

- Each distinct storage is counted once per direction, however many arguments view it
  (`mul(x, x)` reads x once). Its bytes are those its views can touch: for each view,
  the elements it can reach (a stride-0, broadcast dimension reaches 1 element, not
  `size`), merged over the views as the smaller of the union of their address ranges
  and the sum of their reachable bytes, and never more than the storage. So it is at
  least the largest view, at most the storage (two disjoint slices of a fused QKV
  projection count both slices, not the whole buffer twice).
- Read: every tensor argument (lists of tensors included, as `_foreach_` ops take),
  except arguments the op only overwrites.
- Written: every tensor output, and every argument the schema marks written
  (`Tensor(a!)`). An in-place operand (`add_`'s self) is read-modify-write: it counts
  as read *and* written. An `out=` argument, and the destination of an op that only
  overwrites (`copy_`, `fill_`, `zero_`, random fills), is written, not read. An output
  on the storage of an argument the op does not write is that argument handed back
  (`_cudnn_rnn` returns the weight buffer it was given), not written.
- Gathers read only the rows they pick: `embedding`'s weight, the source of
  `index_select` / `gather` / `index`, and `nll_loss`'s log-probabilities count the
  gathered elements, not the whole table. Ops that take a tensor only for its metadata
  (`zeros_like`, `new_zeros`, `nll_loss_backward`'s input) do not read it.
- Allocation-only ops (`empty`, `empty_strided`, `new_empty_strided`…) touch no memory:
  0 bytes. Views are 0 bytes; `costs.op_cost` handles them before this module.
- A tensor without a storage (sparse, nested) counts `numel × element size`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket

from lightspeed.measure.costs.flop_registry import aten
from lightspeed.workload.tensor_walk import tensors_in
from lightspeed.workload.torch_internals import (
    storage_identity,
    written_arguments,
)

# Ops that write their destination without reading it.
_OVERWRITES = frozenset(
    (
        *(aten.copy_, aten.fill_, aten.zero_, aten._foreach_copy_, aten._foreach_zero_),
        *(aten.normal_, aten.uniform_, aten.bernoulli_, aten.random_, aten.exponential_),
        *(aten.geometric_, aten.cauchy_, aten.log_normal_),
    )
)

# Ops that only allocate: the new tensor's contents are garbage until written.
_ALLOCATIONS = frozenset(
    (
        *(aten.empty, aten.empty_like, aten.empty_strided, aten.empty_permuted),
        *(aten.new_empty, aten.new_empty_strided, aten.resize_),
    )
)


# How many elements of one argument an op reads, from its bound arguments and output.
_ElementCount = Callable[[Mapping[str, Any], Any], int]


def _output_elements(bound: Mapping[str, Any], out: Any) -> int:
    return sum(t.numel() for t in tensors_in(out))


def _target_elements(bound: Mapping[str, Any], out: Any) -> int:
    return int(bound["target"].numel())


def _no_elements(bound: Mapping[str, Any], out: Any) -> int:
    return 0


# Ops that read only part of one argument: (the argument's name, elements they read).
_PARTIAL_READS: dict[OpOverloadPacket, tuple[str, _ElementCount]] = {
    aten.embedding: ("weight", _output_elements),
    aten.index_select: ("self", _output_elements),
    aten.gather: ("self", _output_elements),
    aten.index: ("self", _output_elements),
    aten._unsafe_index: ("self", _output_elements),
    aten.nll_loss_forward: ("self", _target_elements),
    aten.nll_loss2d_forward: ("self", _target_elements),
    **{
        op: ("self", _no_elements)  # only the shape, dtype and device of `self` are used
        for op in (
            *(aten.nll_loss_backward, aten.nll_loss2d_backward),
            *(aten.zeros_like, aten.ones_like, aten.full_like, aten.empty_like),
            *(aten.rand_like, aten.randn_like, aten.randint_like),
            *(aten.new_zeros, aten.new_ones, aten.new_full),
        )
    },
}

# The fused optimizers' schemas mark `grads` written because a GradScaler's unscale
# divides them in place; without a `grad_scale` the kernels only read them.
_GRADS_WRITTEN_ONLY_WHEN_SCALED = frozenset(
    (aten._fused_adam_, aten._fused_adamw_, aten._fused_sgd_)
)


def bytes_moved(func: OpOverload, bound: Mapping[str, Any], out: Any) -> tuple[int, int]:
    """(bytes read, bytes written) by one call of `func` with its arguments `bound` by
    name (`bind_arguments`), under the module's rules."""
    if func.overloadpacket in _ALLOCATIONS:
        return 0, 0
    written = written_arguments(func)
    if func.overloadpacket in _GRADS_WRITTEN_ONLY_WHEN_SCALED and bound.get("grad_scale") is None:
        written = {name: is_out for name, is_out in written.items() if name != "grads"}
    overwrites = func.overloadpacket in _OVERWRITES
    partial_name, partial_elements = _PARTIAL_READS.get(func.overloadpacket, ("", _no_elements))
    reads: list[torch.Tensor] = []
    writes: list[torch.Tensor] = []
    unwritten: set[tuple[int, int] | None] = set()
    partial_bytes = 0
    for name, value in bound.items():
        tensors = list(tensors_in(value))
        if name in written:
            writes.extend(tensors)
            if written[name] or overwrites:  # an out= argument or an overwritten destination
                continue
        else:
            unwritten.update(storage_identity(t) for t in tensors)
        if name == partial_name:
            elements = partial_elements(bound, out)
            gathered = elements * tensors[0].element_size() if tensors else 0
            partial_bytes += min(footprint_bytes(tensors), gathered)
        else:
            reads.extend(tensors)
    unwritten.discard(None)  # tensors without a storage are never the same one
    writes.extend(t for t in tensors_in(out) if storage_identity(t) not in unwritten)
    return footprint_bytes(reads) + partial_bytes, footprint_bytes(writes)


@dataclasses.dataclass
class _StorageUse:
    """The views of one storage seen in one direction of one op."""

    storage_bytes: int
    ranges: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    reachable_bytes: int = 0

    def bytes(self) -> int:
        return min(_union_length(self.ranges), self.reachable_bytes, self.storage_bytes)


def footprint_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes the tensors can touch, each storage counted once (see the module's rules)."""
    uses: dict[int, _StorageUse] = {}
    unbacked: dict[int, int] = {}  # id(tensor) -> bytes, for tensors with no storage
    for tensor in tensors:
        identity = storage_identity(tensor)
        if identity is None:
            unbacked[id(tensor)] = tensor.numel() * tensor.element_size()
            continue
        key, storage_bytes = identity
        use = uses.setdefault(key, _StorageUse(storage_bytes))
        span = _span_elements(tensor)
        if span == 0:
            continue
        element = tensor.element_size()
        start = int(tensor.storage_offset()) * element
        use.ranges.append((start, start + span * element))
        use.reachable_bytes += min(span, _distinct_elements(tensor)) * element
    return sum(use.bytes() for use in uses.values()) + sum(unbacked.values())


def _span_elements(tensor: torch.Tensor) -> int:
    """Elements from the view's first to its last addressable element, inclusive."""
    if tensor.numel() == 0:
        return 0
    return 1 + sum(
        (size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )


def _distinct_elements(tensor: torch.Tensor) -> int:
    """Elements the view reaches, counting a stride-0 (broadcast) dimension once."""
    reach = 1
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        reach *= size if stride != 0 else 1
    return reach


def _union_length(ranges: list[tuple[int, int]]) -> int:
    """Total length covered by half-open [start, end) ranges."""
    covered, reached = 0, None
    for start, end in sorted(ranges):
        if reached is None or start > reached:
            covered += end - start
            reached = end
        elif end > reached:
            covered += end - reached
            reached = end
    return covered
