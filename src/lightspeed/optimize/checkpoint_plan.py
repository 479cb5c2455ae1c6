"""Which modules of a model to recompute in backward: a `CheckpointPlan`.

A plan only reads the module tree (names, classes, containers); `optimize.checkpointing`
applies it. With `modules="auto"` it follows Chen, Xu, Zhang and Guestrin 2016,
"Training Deep Nets with Sublinear Memory Cost" (arXiv:1604.06174), §4: a chain of N
layers split into ⌈√N⌉ segments keeps only the segment inputs plus one segment's
activations at a time, O(√N) memory for one extra forward pass.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from collections.abc import Sequence

from torch import nn

from lightspeed.errors import ConfigError, did_you_mean

AUTO = "auto"
# `ops`, or `ops:PATTERN`: recompute op by op (Echo) rather than whole modules; `ops+K`,
# `ops+K:PATTERN`: and K kinds of product of each too.
OPS = "ops"
_OP_LEVEL = re.compile(r"ops(?:\+(?P<products>\d+))?(?::(?P<pattern>.*))?")


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
    """The modules a checkpointed model recomputes in backward, and how they are grouped.

    modules: fully-qualified names (as in `model.named_modules()`) of every module run
    under checkpoint, in model order. segments: the checkpointed units, each a run of
    consecutive entries of `modules` recomputed together (only its input is kept for
    backward); a segment of one name is that module alone. stacks: the containers of
    repeated blocks `auto` chose (empty when modules were named). blocks: N, the blocks
    in each chosen stack, or the number of modules named. reason: one line on the plan.
    ops: the modules of `modules` recomputed op by op (Echo): the outputs of their
    matrix products, convolutions and attention kept, only the cheap ops between them
    recomputed (`optimize.checkpointing.SAVED_OPS`); each is a segment of its own.
    products: for each of `ops`, how many kinds of its products are recomputed too
    (`ops+K`; `optimize.recompute_products`); empty when none is.
    """

    modules: tuple[str, ...]
    segments: tuple[tuple[str, ...], ...]
    stacks: tuple[str, ...]
    blocks: int
    reason: str
    ops: tuple[str, ...] = ()
    products: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        flat = tuple(name for segment in self.segments for name in segment)
        if flat != self.modules:
            raise ValueError(f"segments {self.segments} must cover modules {self.modules}")
        if not set(self.ops) <= {s[0] for s in self.segments if len(s) == 1}:
            raise ValueError(f"op-level modules {self.ops} must each be a segment of one")
        if self.products and len(self.products) != len(self.ops):
            raise ValueError(f"products {self.products} must give one count for each of {self.ops}")

    def products_of(self, module: str) -> int | None:
        """None when `module` is recomputed whole (or not at all); else how many kinds of
        its products are recomputed besides its cheap ops (0: op by op, Echo)."""
        if module not in self.ops:
            return None
        return self.products[self.ops.index(module)] if self.products else 0


def checkpoint_plan(model: nn.Module, modules: Sequence[str] | str = AUTO) -> CheckpointPlan:
    """The plan for checkpointing `model`: the √N segments of its main stack of blocks
    (`modules="auto"`), or the modules whose names match the given shell-style patterns.

    A pattern is matched (`fnmatch`) against every submodule's fully-qualified name; a
    module inside another selected one is covered by that ancestor, so `blocks.*` selects
    the direct children of `blocks`. `STACK.I:J` names a segment: blocks I to J − 1 of
    the `nn.Sequential` STACK, recomputed as one. `ops` recomputes every block of the
    stacks `auto` would choose op by op, `ops:PATTERN` the modules PATTERN names;
    `ops+K` and `ops+K:PATTERN` recompute K kinds of product of each such module too
    (`optimize.recompute_products`). Raises ConfigError for a pattern that matches no
    module, a segment of anything but a Sequential's blocks, and `auto` on a model with
    no container of two or more blocks of one class.
    """
    if isinstance(modules, str) and modules == AUTO:
        return _auto_plan(model)
    patterns = [modules] if isinstance(modules, str) else list(modules)
    op_level = [p for p in patterns if _OP_LEVEL.fullmatch(p)]
    if not op_level:
        return _named_plan(model, patterns)
    return _with_ops(model, [p for p in patterns if p not in op_level], op_level)


def op_level_spec(module: str, products: int = 0) -> str:
    """How `checkpoint` names `module` recomputed op by op with `products` kinds of
    product recomputed too: "ops:NAME" or "ops+K:NAME"."""
    return f"{OPS}+{products}:{module}" if products else f"{OPS}:{module}"


def parse_op_level(spec: str) -> tuple[int, str | None] | None:
    """(K, PATTERN) of `ops+K:PATTERN` (K 0 without `+K`; PATTERN None for every block
    of the stacks `auto` chooses); None when `spec` is not op by op."""
    found = _OP_LEVEL.fullmatch(spec)
    if found is None:
        return None
    return int(found["products"] or 0), found["pattern"]


def _with_ops(model: nn.Module, patterns: list[str], op_level: list[str]) -> CheckpointPlan:
    """The plan of `patterns` (whole modules and segments) and of `op_level` (`ops`: every
    block of the stacks `auto` would choose; `ops:PATTERN`: the modules PATTERN names;
    `ops+K…`: with K kinds of product recomputed too), recomputed op by op, each module
    on its own."""
    names: list[str] = []
    depth: dict[str, int] = {}
    for spec in op_level:
        parsed = parse_op_level(spec)
        assert parsed is not None
        count, pattern = parsed
        if pattern is None:
            named = [m for segment in _every_block(model) for m in segment]
        else:
            named = list(_named_plan(model, [pattern]).modules)
        for name in named:
            if depth.setdefault(name, count) != count:
                raise ConfigError(
                    f"checkpoint: {name!r} is named op by op with {depth[name]} and with"
                    f" {count} kinds of product recomputed; name it once."
                )
        names += named
    whole = _named_plan(model, patterns) if patterns else None
    taken = set(whole.modules) if whole else set()
    clash = [n for n in names if n in taken or any(a in taken for a in _ancestors(n))]
    if clash:
        raise ConfigError(
            f"checkpoint: {clash[0]!r} is recomputed whole already; name it once, whole or"
            " op by op (ops:NAME)."
        )
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    chosen = set(names)
    outermost = [n for n in dict.fromkeys(names) if not any(a in chosen for a in _ancestors(n))]
    units = [*(whole.segments if whole else ()), *((n,) for n in outermost)]
    units.sort(key=lambda unit: order[unit[0]])
    products = tuple(depth[n] for n in outermost)
    counts = sorted(set(products))
    reason = f"{len(outermost)} modules recomputed op by op (Echo)"
    if counts != [0]:
        what = " or ".join(map(str, counts))
        reason += f", {what} kinds of product of each recomputed too"
    reason += f", and {whole.reason}" if whole else ""
    plan = _plan(units, whole.stacks if whole else (), len(units), reason)
    return dataclasses.replace(
        plan, ops=tuple(outermost), products=products if any(products) else ()
    )


def _every_block(model: nn.Module) -> list[tuple[str, ...]]:
    """Every block of the stacks `auto` chooses, each on its own."""
    try:
        auto = _auto_plan(model)
    except ConfigError:
        raise ConfigError(
            f"checkpoint: found no stack of repeated blocks in {type(model).__name__} for"
            " 'ops' to recompute op by op; name the modules instead (ops:MODULE)."
        ) from None
    containers = dict(model.named_modules())
    return [
        (_child_name(stack, child),)
        for stack in auto.stacks
        for child, _ in containers[stack].named_children()
    ]


def segment_sizes(blocks: int) -> list[int]:
    """Sizes of the ⌈√blocks⌉ runs of consecutive blocks Chen et al. checkpoint, as even
    as possible, longer runs first: 8 blocks → [3, 3, 2]; 12 → [3, 3, 3, 3]."""
    if blocks < 1:
        raise ValueError(f"a stack needs at least one block, got {blocks}")
    count = math.ceil(math.sqrt(blocks))
    base, extra = divmod(blocks, count)
    return [base + 1] * extra + [base] * (count - extra)


def repeated_stacks(model: nn.Module) -> list[tuple[str, int]]:
    """(name, N) of every `nn.ModuleList` or `nn.Sequential` whose N >= 2 children are
    all of one class, in model order."""
    found = []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        classes = {type(child) for child in module.children()}
        if len(module) >= 2 and len(classes) == 1:
            found.append((name, len(module)))
    return found


def merges_segments(stack: nn.Module) -> bool:
    """Whether consecutive blocks of `stack` can run as one checkpointed segment: only
    when `nn.Sequential.forward` itself calls them, each one's output feeding the next.
    A ModuleList is looped over by its parent's forward, which may do anything between
    blocks, so its blocks are checkpointed one by one."""
    return isinstance(stack, nn.Sequential) and type(stack).forward is nn.Sequential.forward


def _auto_plan(model: nn.Module) -> CheckpointPlan:
    stacks = repeated_stacks(model)
    if not stacks:
        raise ConfigError(
            f"checkpoint: found no stack of repeated blocks in {type(model).__name__} (an"
            " nn.ModuleList or nn.Sequential of two or more modules of one class); name the"
            " modules to checkpoint instead of 'auto'."
        )
    n = max(size for _, size in stacks)
    # An encoder-decoder has two stacks of one depth: both are the main chain.
    chosen = [name for name, size in stacks if size == n]
    containers = dict(model.named_modules())
    segments: list[tuple[str, ...]] = []
    merged = []
    for stack in chosen:
        children = [_child_name(stack, child) for child, _ in containers[stack].named_children()]
        if merges_segments(containers[stack]):
            merged.append(stack)
            start = 0
            for size in segment_sizes(n):
                segments.append(tuple(children[start : start + size]))
                start += size
        else:
            segments.extend((child,) for child in children)
    names = ("each of " if len(chosen) > 1 else "") + " and ".join(repr(s) for s in chosen)
    per_stack = len(segment_sizes(n))
    if len(merged) == len(chosen):
        reason = (
            f"{n} blocks in {names}: ⌈√{n}⌉ = {per_stack} segments of consecutive blocks,"
            " each recomputed as one (Chen et al. 2016)"
        )
    else:
        reason = (
            f"{n} blocks in {names}: each block checkpointed on its own, since a ModuleList's"
            f" blocks are called by its parent's forward and cannot be merged into"
            f" ⌈√{n}⌉ = {per_stack} segments"
        )
    return _plan(segments, tuple(chosen), n, reason)


def _named_plan(model: nn.Module, patterns: list[str]) -> CheckpointPlan:
    if not patterns:
        raise ConfigError("checkpoint: name at least one module, or pass 'auto'.")
    segments = [_segment(model, p) for p in patterns if _SEGMENT.fullmatch(p)]
    if segments:
        return _segmented_plan(model, segments, [p for p in patterns if not _SEGMENT.fullmatch(p)])
    # The root is the whole model: recomputing all of it keeps nothing less.
    names = [name for name, _ in model.named_modules() if name]
    selected = []
    for pattern in patterns:
        matched = fnmatch.filter(names, pattern)
        if not matched:
            raise ConfigError(
                f"checkpoint: {pattern!r} names no module of {type(model).__name__}."
                + (did_you_mean(pattern, names) or f" Its modules: {', '.join(names[:8])}…")
            )
        selected.extend(matched)
    chosen = set(selected)
    # Model order, and a module inside a selected one left to its ancestor: nested
    # checkpoints would recompute the inner module twice.
    outermost = [
        name for name in names if name in chosen and not any(a in chosen for a in _ancestors(name))
    ]
    reason = f"{len(outermost)} named modules, each checkpointed on its own"
    return _plan([(name,) for name in outermost], (), len(outermost), reason)


# STACK.I:J — blocks I to J − 1 of the Sequential STACK as one segment.
_SEGMENT = re.compile(r"(?P<stack>.+)\.(?P<start>\d+):(?P<stop>\d+)")


def _segment(model: nn.Module, pattern: str) -> tuple[str, tuple[str, ...]]:
    """(stack, the segment's block names) that `STACK.I:J` names."""
    found = _SEGMENT.fullmatch(pattern)
    assert found is not None
    stack_name, start, stop = found["stack"], int(found["start"]), int(found["stop"])
    stack = dict(model.named_modules()).get(stack_name)
    if stack is None or not merges_segments(stack):
        raise ConfigError(
            f"checkpoint: {pattern!r} names a segment, which needs {stack_name!r} to be an"
            " nn.Sequential whose own forward calls its blocks; name its blocks one by one."
        )
    children = [name for name, _ in stack.named_children()]
    if not 0 <= start < stop <= len(children):
        raise ConfigError(
            f"checkpoint: {pattern!r} is outside {stack_name!r}'s blocks 0 to {len(children)}."
        )
    return stack_name, tuple(_child_name(stack_name, c) for c in children[start:stop])


def _segmented_plan(
    model: nn.Module, segments: list[tuple[str, tuple[str, ...]]], others: list[str]
) -> CheckpointPlan:
    """Named segments (and any other named modules, each on its own), in model order."""
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    covered = {block for _, blocks in segments for block in blocks}
    if len(covered) < sum(len(blocks) for _, blocks in segments):
        raise ConfigError("checkpoint: the named segments overlap; give each block once.")
    singles = _named_plan(model, others).segments if others else ()
    units = [blocks for _, blocks in segments] + [
        s for s in singles if not any(s[0] == b or s[0].startswith(f"{b}.") for b in covered)
    ]
    units.sort(key=lambda unit: order[unit[0]])
    stacks = tuple(dict.fromkeys(stack for stack, _ in segments))
    reason = f"{len(segments)} named segments" + (
        f" and {len(units) - len(segments)} named modules" if len(units) > len(segments) else ""
    )
    return _plan(units, stacks, len(units), reason)


def _plan(
    segments: list[tuple[str, ...]], stacks: tuple[str, ...], blocks: int, reason: str
) -> CheckpointPlan:
    modules = tuple(name for segment in segments for name in segment)
    return CheckpointPlan(
        modules=modules, segments=tuple(segments), stacks=stacks, blocks=blocks, reason=reason
    )


def _child_name(parent: str, child: str) -> str:
    return f"{parent}.{child}" if parent else child


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]
