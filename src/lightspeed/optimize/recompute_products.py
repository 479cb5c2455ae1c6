"""Which matrix products, convolutions and attention calls an op-level region recomputes
too (`ops+K:BLOCK` in `optimize.checkpoint`).

Op by op (Echo) keeps the output of every expensive op of a block and recomputes only the
cheap ones between them. Under a tighter memory budget, torch.compile's min-cut partitioner
recomputes some products as well. `ops+K` does the same in selective checkpointing: the K
kinds of product of the block that free the most bytes per FLOP recomputed are dropped
from what is kept. For a linear layer the ratio is 2 / (its input features) bytes per
FLOP in fp32, and for attention 1 / (its sequence length) per head dimension: the
products with the least work per byte kept go first. An op that draws random numbers
(PyTorch's attention kernels, for their dropout) goes after every other: recomputing it
replays the RNG, its state saved in the forward and restored around it, and under
torch.compile on an H200 recomputing the encoder's attention cost 2 ms a step (20 %)
where recomputing products of as many FLOPs cost 0.3 ms (`docs/benchmarks.md`).

A kind of product is the op and the shapes of its tensor inputs, as a profile records
them (`OpRecord.name`, `OpRecord.input_shapes`), so that the planner, which ranks a
block's products from its profile, and the policy, which sees each call as it is
dispatched, name the same ones; both rank them from those shapes alone (`flops_of`:
2 × the contraction's depth × the output's elements). Calls of one kind in one block
(GPT-2's three projections of one shape, say) are kept or recomputed together.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed.errors import ConfigError
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import OpRecord
from lightspeed.predict.carry import forward_ops, ops_s
from lightspeed.workload.tensor_walk import tensors_in
from lightspeed.workload.torch_internals import fake_tensors, is_fake, op_name

# ("aten::mm", ((2048, 512), (512, 1536))): an op and its tensor inputs' shapes.
ProductKind = tuple[str, tuple[tuple[int, ...], ...]]


@dataclasses.dataclass(frozen=True)
class Product:
    """One kind of expensive op in a block's forward: `kind`; `bytes`, what keeping its
    outputs holds, over all its calls; `flops`, what recomputing them costs (0 when not
    known); `first`, the position of its first call among the block's ops; `random`,
    whether the op draws random numbers (`torch.Tag.nondeterministic_seeded`)."""

    kind: ProductKind
    bytes: int
    flops: int
    first: int
    random: bool = False


def product_kind(op: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> ProductKind:
    """The kind of one call of an aten op, from its arguments (shapes as Python ints)."""
    shapes = tuple(tuple(int(d) for d in t.shape) for t in tensors_in((args, kwargs)))
    return op_name(op), shapes


def flops_of(kind: ProductKind, output_shape: Sequence[int]) -> int:
    """FLOPs of one call of a matrix product or convolution of `kind` giving an output of
    `output_shape`: 2 × its contraction's depth × the output's elements (the depth: the
    first factor's last dimension; a convolution's weight's elements per output channel);
    0 for any other op (attention, a recurrent layer), whose FLOPs are not ranked."""
    name, shapes = kind
    op = name.removeprefix("aten::")
    first = 1 if op in ("addmm", "_addmm_activation", "baddbmm") else 0
    if op in _CONVOLUTIONS and len(shapes) > 1:
        depth = math.prod(shapes[1][1:])
    elif op in _PRODUCTS and len(shapes) > first and shapes[first]:
        depth = shapes[first][-1]
    else:
        return 0
    return 2 * depth * math.prod(output_shape)


_PRODUCTS = frozenset({"mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "_scaled_mm"})
_CONVOLUTIONS = frozenset(
    {"convolution", "_convolution", "mkldnn_convolution", "cudnn_convolution"}
)


def kind_of(op: OpRecord) -> ProductKind:
    """The kind of a profiled op call."""
    return op.name, tuple(tuple(s) for s in op.input_shapes)


def recompute_order(products: Iterable[Product]) -> list[ProductKind]:
    """The kinds in the order `ops+K` recomputes them: most bytes freed per FLOP first,
    then the larger, then the earlier; a product whose FLOPs are not known after those,
    and one that draws random numbers after every other."""

    def key(product: Product) -> tuple[bool, float, int, int]:
        per_flop = product.bytes / product.flops if product.flops > 0 else 0.0
        return product.random, -per_flop, -product.bytes, product.first

    return [product.kind for product in sorted(products, key=key)]


def first_kinds(products: Sequence[Product], count: int, where: str) -> frozenset[ProductKind]:
    """The first `count` kinds of `recompute_order(products)`. Raises ConfigError when
    the block `where` has fewer."""
    _check_count(count, len(products), where)
    return frozenset(recompute_order(products)[:count])


def _check_count(count: int, kinds: int, where: str) -> None:
    """Raise ConfigError when `ops+count` asks more kinds of product than the block
    `where` has."""
    if count > kinds:
        raise ConfigError(
            f"checkpoint: ops+{count} asks {where!r} to recompute {count} kinds of product,"
            f" and it has {kinds}; give at most ops+{kinds}."
        )


def products_in(ops: Iterable[OpRecord], names: frozenset[str]) -> list[Product]:
    """The products among `ops` (a block's forward ops, from a profile) whose op is in
    `names` ("aten::mm", ...), one per kind."""
    found: dict[ProductKind, Product] = {}
    for op in ops:
        if op.name not in names:
            continue
        kind = kind_of(op)
        size = sum(
            math.prod(shape) * getattr(torch, dtype).itemsize
            for shape, dtype in zip(op.output_shapes, op.output_dtypes, strict=True)
        )
        flops = flops_of(kind, op.output_shapes[0]) if op.output_shapes else 0
        _add(found, Product(kind, size, flops, op.index, _draws_random(op.name)))
    return list(found.values())


def products_seconds(profile: Profile, module: str, names: frozenset[str]) -> list[float]:
    """Seconds `ops+K:module` recomputes in products, for K = 0, 1, … up to the kinds of
    product (ops in `names`) its forward calls in the profile's step: the first K kinds'
    ops and their share of the time outside ops by count."""
    ops = forward_ops(profile, module)
    by_kind: dict[ProductKind, list[OpRecord]] = defaultdict(list)
    for op in ops:
        by_kind[kind_of(op)].append(op)
    seconds = [0.0]
    for kind in recompute_order(products_in(ops, names)):
        seconds.append(seconds[-1] + ops_s(profile, by_kind[kind]))
    return seconds


def recomputed_products_s(
    profile: Profile, module: str, products: int, names: frozenset[str]
) -> float:
    """Seconds the first `products` kinds of `module`'s products (those whose op is in
    `names`) take in the profile's forward, as `ops+K:module` recomputes them
    (`products_seconds`)."""
    if not products:
        return 0.0
    seconds = products_seconds(profile, module, names)
    _check_count(products, len(seconds) - 1, module)
    return seconds[products]


def region_products(
    function: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], saved: frozenset[Any]
) -> list[Product]:
    """The products a region's forward `function(*args, **kwargs)` calls whose op packet
    is in `saved`, found by running it once on fake tensors (no kernel runs, no memory is
    taken; the RNG is left as it was)."""
    recorder = _Recorder(saved)
    already_fake = any(is_fake(t) for t in tensors_in((args, kwargs)))
    with torch.random.fork_rng(devices=[]):
        if already_fake:  # a shape-only step: the tensors belong to its own fake mode
            with recorder:
                function(*args, **kwargs)
        else:
            with fake_tensors(), recorder:
                function(*args, **kwargs)
    return list(recorder.found.values())


class _Recorder(TorchDispatchMode):
    def __init__(self, saved: frozenset[Any]) -> None:
        super().__init__()
        self.saved = saved
        self.found: dict[ProductKind, Product] = {}
        self.calls = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket in self.saved:
            outputs = list(tensors_in(out))
            size = sum(t.numel() * t.element_size() for t in outputs)
            kind = product_kind(func, args, kwargs)
            flops = flops_of(kind, outputs[0].shape) if outputs else 0
            random = _draws_random(op_name(func))
            _add(self.found, Product(kind, size, flops, self.calls, random))
        self.calls += 1
        return out


def _add(found: dict[ProductKind, Product], product: Product) -> None:
    """Sum `product` into the entry of its kind."""
    before = found.get(product.kind)
    if before is not None:
        product = dataclasses.replace(
            product,
            bytes=before.bytes + product.bytes,
            flops=before.flops + product.flops,
            first=min(before.first, product.first),
        )
    found[product.kind] = product


@functools.cache
def _draws_random(name: str) -> bool:
    """Whether the aten op `name` ("aten::mm") draws random numbers, by its tags."""
    namespace, _, op = name.partition("::")
    packet = getattr(getattr(torch.ops, namespace, None), op, None)
    if packet is None:
        return False
    return any(
        torch.Tag.nondeterministic_seeded in getattr(packet, overload).tags
        for overload in packet.overloads()
    )
