"""Activation checkpointing: `Workload → Workload` that recomputes activations in backward.

Source: Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", with
`torch.utils.checkpoint.checkpoint(use_reentrant=False)` doing the recompute. The plan
(`checkpoint_plan`) says which modules; this module makes their forward checkpointed.
Modules named `ops:NAME` are recomputed op by op (Echo: Zheng et al., "Echo: Compiler-based
GPU Memory Footprint Reduction for LSTM RNN Training", ISCA 2020): the outputs of their
matrix products, convolutions and attention (`SAVED_OPS`) are kept and only the cheap ops
between them run again, through PyTorch's selective activation checkpointing. With
`ops+K:NAME` the K kinds of product that keep the most bytes per FLOP are recomputed too
(`optimize.recompute_products`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils import checkpoint as torch_checkpoint
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed.errors import ConfigError
from lightspeed.optimize.checkpoint_plan import (
    AUTO,
    CheckpointPlan,
    checkpoint_plan,
    merges_segments,
)
from lightspeed.optimize.recompute_products import (
    Product,
    ProductKind,
    first_kinds,
    product_kind,
    region_products,
)
from lightspeed.workload import Workload
from lightspeed.workload.tensor_walk import tensors_in

__all__ = [
    "CheckpointPlan",
    "RegionObserver",
    "checkpoint",
    "checkpoint_model",
    "checkpoint_plan",
    "observing_kept",
    "observing_regions",
]

# Called for each checkpointed region entered, in place of running it:
# (modules, forward, checkpointed, args, kwargs) → the region's output, where `modules`
# are the modules the region runs (one, or a segment's blocks), `forward(*a, **k)` runs
# the region plainly and `checkpointed(*a, **k)` as checkpoint would.
RegionObserver = Callable[
    [Sequence[nn.Module], Callable[..., Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]],
    Any,
]
_OBSERVER: contextvars.ContextVar[RegionObserver | None] = contextvars.ContextVar(
    "lightspeed_region_observer", default=None
)


@contextlib.contextmanager
def observing_regions(observer: RegionObserver) -> Iterator[None]:
    """Within the block, every checkpointed region entered calls
    `observer(modules, forward, checkpointed, args, kwargs)` and returns what it
    returns, for a measurement of what checkpoint itself costs
    (`measure.checkpoint_cost`)."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


# Called with the tensors an op-level region keeps for backward as its forward makes them
# (the outputs of `SAVED_OPS`, which selective checkpointing holds itself, out of sight of
# autograd's saved-tensor hooks), for a measurement of memory (`measure.memory`).
_KEPT: contextvars.ContextVar[Callable[[Sequence[torch.Tensor]], None] | None] = (
    contextvars.ContextVar("lightspeed_kept_observer", default=None)
)


@contextlib.contextmanager
def observing_kept(observer: Callable[[Sequence[torch.Tensor]], None]) -> Iterator[None]:
    """Within the block, every op-level region's forward calls `observer(tensors)` with
    the outputs it keeps for backward."""
    token = _KEPT.set(observer)
    try:
        yield
    finally:
        _KEPT.reset(token)


# Ids of the Sequential stacks now running one of their segments under checkpoint: the
# blocks inside it then run plainly. A context variable, so that threads and the
# autograd engine's own threads each see only the segments they run.
_RUNNING_SEGMENT: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "lightspeed_running_segment", default=frozenset()
)


def checkpoint(workload: Workload, modules: Sequence[str] | str = AUTO) -> Workload:
    """`workload` with the selected submodules of its model recomputed in backward.

    Source: Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost"), through
    `torch.utils.checkpoint.checkpoint(use_reentrant=False)`. `modules` is "auto" (the
    ⌈√N⌉ segments of the model's longest stack of repeated blocks), "ops" (every block of
    those stacks recomputed op by op, Echo) or fully-qualified module names, shell-style
    patterns allowed, `ops:NAME` for one recomputed op by op, `ops+K` and `ops+K:NAME`
    with K kinds of product of each block recomputed too (see `checkpoint_plan`). The
    plan is made when the model is built, so a name that matches nothing raises then.
    Under torch.compile an op-level module's policy is handed to PyTorch's own selective
    checkpointing; a module with BatchNorm-style statistics is refused there.

    Preconditions: each selected module's forward is a function of its inputs, its
    parameters and the RNG (which checkpoint restores, so dropout recomputes the same
    masks); the only state it changes is BatchNorm-style running statistics, which the
    recompute updates on throwaway copies. Equivalence: one step gives the same loss,
    gradients, parameters and running statistics as `workload`, bit for bit on a
    deterministic device (the recompute repeats the same kernels on the same inputs, and
    the backward graph is the one `workload` builds); parameter and state_dict names are
    unchanged. Only training-mode forwards with grad enabled are checkpointed.
    """

    def model() -> nn.Module:
        built = workload.model()
        checkpoint_model(built, modules)
        return built

    return dataclasses.replace(workload, name=f"{workload.name}+checkpoint", model=model)


def checkpoint_model(model: nn.Module, modules: Sequence[str] | str = AUTO) -> CheckpointPlan:
    """Make the modules `checkpoint_plan(model, modules)` selects recompute in backward,
    in place, and return that plan. Module objects, parameters and buffers stay the same;
    only the selected modules' (or, for merged segments, their Sequential's) `forward`
    is replaced. Raises ConfigError when the model is checkpointed already."""
    if any(isinstance(m.__dict__.get("forward"), _Checkpointed) for m in model.modules()):
        raise ConfigError(
            f"checkpoint: {type(model).__name__} is checkpointed already; apply checkpoint once."
        )
    plan = checkpoint_plan(model, modules)
    named = dict(model.named_modules())
    by_stack: dict[str, list[list[nn.Module]]] = {}
    for segment in plan.segments:
        parent = segment[0].rpartition(".")[0]
        if parent in plan.stacks and merges_segments(named[parent]):
            by_stack.setdefault(parent, []).append([named[name] for name in segment])
    for parent, segments in by_stack.items():
        stack = named[parent]
        stack.forward = _SegmentedStack(stack, segments)
    for name in plan.modules:
        parent = name.rpartition(".")[0]
        # A block of a merged segment checkpoints itself only when its Sequential is not
        # what calls it (a parent looping over the Sequential as over a list).
        stack = named[parent] if parent in by_stack else None
        products = plan.products_of(name)
        named[name].forward = _CheckpointedModule(named[name], name, stack, products)
    return plan


def recomputed_products(module: nn.Module) -> int | None:
    """None unless `module` is recomputed op by op; else how many kinds of its products
    are recomputed too (0 for `ops:`, K for `ops+K:`)."""
    forward = module.__dict__.get("forward")
    return forward.products if isinstance(forward, _CheckpointedModule) else None


class _Checkpointed:
    """Base of the forwards this module installs, so a second application is refused."""


class _CheckpointedModule(_Checkpointed):
    """A module's forward run under checkpoint; the module's own forward inside a merged
    segment of `stack` that is checkpointed already, and when not training. `products`:
    None to recompute it whole, K ≥ 0 to recompute it op by op with K kinds of product
    recomputed too."""

    def __init__(
        self, module: nn.Module, name: str, stack: nn.Module | None, products: int | None
    ) -> None:
        # References, not ids, so that a deep copy of the model refers to its own copies.
        self.module = module
        self.name = name
        self.original: Callable[..., Any] = module.forward
        self.stack = stack
        self.products = products
        # The kinds of product recomputed, by the shapes, dtypes and devices of the inputs.
        self.kinds: dict[tuple[Any, ...], frozenset[ProductKind]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        inside = self.stack is not None and id(self.stack) in _RUNNING_SEGMENT.get()
        if inside or not (self.module.training and torch.is_grad_enabled()):
            return self.original(*args, **kwargs)
        if self.products is None:
            return _recomputed(self.original, [self.module], *args, **kwargs)
        kinds = self._recomputed_kinds(args, kwargs) if self.products else frozenset()
        return _recomputed(self.original, [self.module], *args, op_level=kinds, **kwargs)

    def _recomputed_kinds(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> frozenset[ProductKind]:
        """The kinds of product this block recomputes on these inputs, found once for
        each set of input shapes by running its forward on fake tensors."""
        key = tuple((tuple(t.shape), t.dtype, t.device.type) for t in tensors_in((args, kwargs)))
        if key not in self.kinds:
            find = self._products
            if torch.compiler.is_compiling():  # a fake run is not traced: a graph break
                find = torch.compiler.disable(self._products)
            assert self.products is not None
            self.kinds[key] = first_kinds(find(args, kwargs), self.products, self.name)
        return self.kinds[key]

    def _products(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Product]:
        # The fake run updates the norms' statistics too: on throwaway copies.
        norms = [m for m in self.module.modules() if _tracks_running_stats(m)]
        with _ThrowawayRunningStats(norms):
            return region_products(self.original, args, kwargs, SAVED_OPS)


class _SegmentedStack(_Checkpointed):
    """`nn.Sequential.forward` with each segment of consecutive blocks checkpointed as one;
    blocks outside every segment run plainly."""

    def __init__(self, stack: nn.Module, segments: list[list[nn.Module]]) -> None:
        self.stack = stack
        self.original: Callable[..., Any] = stack.forward
        # The stack's blocks in order, as runs: a segment, or one block outside any.
        first = {id(segment[0]): segment for segment in segments}
        inside = {id(block) for segment in segments for block in segment}
        self.runs: list[tuple[bool, list[nn.Module]]] = []
        for block in stack.children():
            if id(block) in first:
                self.runs.append((True, first[id(block)]))
            elif id(block) not in inside:
                self.runs.append((False, [block]))

    def __call__(self, x: Any) -> Any:
        if not (self.stack.training and torch.is_grad_enabled()):
            return self.original(x)
        for checkpointed, blocks in self.runs:
            x = _recomputed(self._run_segment, blocks, blocks, x) if checkpointed else blocks[0](x)
        return x

    def _run_segment(self, segment: list[nn.Module], x: Any) -> Any:
        token = _RUNNING_SEGMENT.set(_RUNNING_SEGMENT.get() | {id(self.stack)})
        try:
            for block in segment:
                x = block(x)
            return x
        finally:
            _RUNNING_SEGMENT.reset(token)


def _recomputed(
    function: Callable[..., Any],
    owners: Sequence[nn.Module],
    *args: Any,
    op_level: frozenset[ProductKind] | None = None,
    **kwargs: Any,
) -> Any:
    """`function(*args, **kwargs)` under non-reentrant checkpoint; the recompute updates
    copies of the running statistics of the norm layers in `owners`. `op_level`, when not
    None: only the ops that are not `SAVED_OPS`, and the calls of those of the kinds it
    holds, are recomputed (selective activation checkpointing)."""
    norms = [m for owner in owners for m in owner.modules() if _tracks_running_stats(m)]
    recompute = _ThrowawayRunningStats(norms) if norms else None
    policy = functools.partial(_keep_products, op_level or frozenset())

    def contexts() -> tuple[Any, Any]:
        if op_level is None:
            return contextlib.nullcontext(), recompute or contextlib.nullcontext()
        forward, again = torch_checkpoint.create_selective_checkpoint_contexts(policy)
        # A measurement's observers are not read under torch.compile (a context
        # variable breaks its graph), where no measurement runs.
        observer = None if torch.compiler.is_compiling() else _KEPT.get()
        if observer is not None:  # inside the caching mode: it sees each op first
            forward = _both(forward, _Kept(observer, op_level))
        # The statistics' copies are made outside the selective mode, which would take
        # them for ops of the region that forward never ran.
        return forward, _both(recompute, again) if recompute else again

    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling():
            return torch_checkpoint.checkpoint(
                function, *args, use_reentrant=False, context_fn=contexts, **kwargs
            )
        # torch.compile takes a selective policy only as a partial of PyTorch's own
        # contexts, and no context of ours: the norms' statistics would be updated by
        # the recompute too.
        if norms:
            raise ConfigError(
                f"checkpoint: {type(owners[0]).__name__} tracks running statistics (BatchNorm),"
                " which the recompute would update a second time under torch.compile;"
                " checkpoint it without torch.compile, or compile it without checkpoint."
            )
        if op_level is not None:
            kwargs["context_fn"] = functools.partial(
                torch_checkpoint.create_selective_checkpoint_contexts, policy
            )
        return torch_checkpoint.checkpoint(function, *args, use_reentrant=False, **kwargs)

    observer = None if torch.compiler.is_compiling() else _OBSERVER.get()
    if observer is not None:
        return observer(owners, function, checkpointed, args, kwargs)
    return checkpointed(*args, **kwargs)


def _saved_ops() -> frozenset[Any]:
    """The aten ops whose outputs op-level recomputation keeps: matrix products,
    convolutions and attention kernels (those this torch has)."""
    names = (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "_addmm_activation",
        "convolution",
        "_convolution",
        "mkldnn_convolution",
        "cudnn_convolution",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_flash_attention_forward",
        "_efficient_attention_forward",
        "_scaled_mm",
        "mkldnn_rnn_layer",
        "_thnn_fused_lstm_cell",
        "_thnn_fused_gru_cell",
    )
    found = (getattr(torch.ops.aten, name, None) for name in names)
    return frozenset(packet for packet in found if packet is not None)


# What op-level recomputation keeps (Echo: the expensive ops' outputs; everything cheap
# between them is recomputed from them in backward), and their names in a profile.
SAVED_OPS = _saved_ops()
SAVED_OP_NAMES = frozenset(f"aten::{packet.__name__}" for packet in SAVED_OPS)


def _keeps(recomputed: frozenset[ProductKind], op: Any, args: Any, kwargs: Any) -> bool:
    """Whether op-level recomputation keeps the output of this call of `op`."""
    packet = getattr(op, "overloadpacket", op)
    if packet not in SAVED_OPS:
        return False
    return not recomputed or product_kind(op, args, kwargs) not in recomputed


def _keep_products(
    recomputed: frozenset[ProductKind], ctx: Any, op: Any, *args: Any, **kwargs: Any
) -> Any:
    """The selective-checkpoint policy of op-level recomputation, with the calls of the
    kinds of product in `recomputed` recomputed too."""
    if _keeps(recomputed, op, args, kwargs):
        return torch_checkpoint.CheckpointPolicy.MUST_SAVE
    return torch_checkpoint.CheckpointPolicy.PREFER_RECOMPUTE


class _Kept(TorchDispatchMode):
    """Hands the outputs op-level recomputation keeps to an observer as the forward makes
    them."""

    def __init__(
        self,
        observer: Callable[[Sequence[torch.Tensor]], None],
        recomputed: frozenset[ProductKind],
    ) -> None:
        super().__init__()
        self.observer = observer
        self.recomputed = recomputed

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _keeps(self.recomputed, func, args, kwargs):
            self.observer(list(tensors_in(out)))
        return out


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Iterator[None]:
    """Two context managers entered as one, the first outermost."""
    with first, second:
        yield


def _tracks_running_stats(module: nn.Module) -> bool:
    # BatchNorm, SyncBatchNorm and InstanceNorm(track_running_stats=True) alike.
    return bool(getattr(module, "track_running_stats", False)) and isinstance(
        getattr(module, "running_mean", None), torch.Tensor
    )


class _ThrowawayRunningStats:
    """Entered around a recompute: the norm layers' buffers (running mean and variance,
    batches tracked) are swapped for copies the recompute may update, and put back on
    exit, so the step updates them once, as without checkpoint. The forward kernels are
    the same (the layers still get running statistics), so the outputs are too.
    Re-entrant across recomputes: each entry saves its own originals."""

    def __init__(self, norms: list[nn.Module]) -> None:
        self.norms = norms
        self.saved: list[list[dict[str, torch.Tensor]]] = []

    def __enter__(self) -> None:
        originals = []
        for norm in self.norms:
            buffers = dict(norm.named_buffers(recurse=False))
            originals.append(buffers)
            for name, buffer in buffers.items():
                setattr(norm, name, buffer.clone())
        self.saved.append(originals)

    def __exit__(self, *exc: object) -> None:
        for norm, buffers in zip(self.norms, self.saved.pop(), strict=True):
            for name, buffer in buffers.items():
                setattr(norm, name, buffer)
