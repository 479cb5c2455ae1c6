"""Which blocks to checkpoint, and in which segments, for a step to fit a memory budget
at the least recompute time.

The step's blocks are those of its stacks of repeated blocks
(`optimize.checkpoint_plan.repeated_stacks`; not those inside another stack's block).
For each stack the planner weighs these options: nothing; the first k segments of
⌈√N⌉-block segments (k = 1 … ⌈√N⌉); every block covered by segments of s blocks, for
each s from 1 to N (an `nn.ModuleList`, whose blocks its parent's forward calls, only
s = 1); op-level recomputation (Echo, `ops:BLOCK`) of the first k blocks, k = 1 … N:
the outputs of their matrix products, convolutions and attention kept, the cheap ops
between them recomputed; and every block op by op with K of its kinds of product
recomputed too (`ops+K:BLOCK`, `optimize.recompute_products`), K = 1 … the fewest kinds a
block has, in every block, or in the first half of them and K − 1 in the rest (the
memory budgets between two depths). Chen et al.'s √N plan (`checkpoint(workload,
"auto")`) is one of them, so the choice is never worse than it on the figures the planner
weighs:

- memory: the step's peak with the option's segments checkpointed (every stack's
  together), run on fake tensors (`measure.shape_only`, exact; not a sum of per-block
  savings, since a block recomputed late in backward can raise the peak);
- time: each covered block's forward measured in the profile (its ops, and its share of
  the time outside ops by op count), run again in backward, plus checkpoint's own work
  for the block, timed on the device with every block checkpointed on its own
  (`measure.checkpoint_cost`; left out for a profile measured elsewhere) — a segment of
  several blocks costs less than this sum, so the time of a plan of long segments is
  over-stated, never under. An op-level block recomputes only part of its forward, which
  no op of the profile says; on the device it is timed whole, region by region (all its
  checkpoint adds to the block's plain forward and backward), and for a profile measured
  elsewhere it is its forward's ops that are not kept
  (`optimize.checkpointing.SAVED_OP_NAMES`), with their share of the time outside ops.
  `ops+K:BLOCK` adds to that its K kinds of product as the profile measured them.

Every combination of the stacks' options is weighed when there are at most
`_MAX_COMBINATIONS`; beyond that each stack keeps only nothing and full coverage. The
least time whose peak fits wins; ties go to the lower peak.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

from torch import nn

from lightspeed import units
from lightspeed.errors import ConfigError
from lightspeed.facts.profile import Profile
from lightspeed.measure.checkpoint_cost import checkpoint_costs
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.optimize.checkpoint_plan import (
    OPS,
    checkpoint_plan,
    merges_segments,
    op_level_spec,
    repeated_stacks,
)
from lightspeed.optimize.checkpointing import SAVED_OP_NAMES, checkpoint
from lightspeed.optimize.recompute_products import products_seconds
from lightspeed.predict.carry import forward_s
from lightspeed.predict.shapes import shape_settings
from lightspeed.predict.whatif import kernels_here
from lightspeed.workload import Workload

# The most combinations of the stacks' options run on fake tensors.
_MAX_COMBINATIONS = 64


@dataclasses.dataclass(frozen=True)
class CheckpointOption:
    """One way to checkpoint the step: `modules`, as `optimize.checkpointing` takes them
    (blocks, or `STACK.I:J` segments); its `peak_bytes` and `activations_bytes` on fake
    tensors; `recompute_s`, the seconds it adds to the step."""

    modules: tuple[str, ...]
    peak_bytes: int
    activations_bytes: int
    recompute_s: float


# What a memory budget bounds: the step's peak, or the activations it keeps for backward.
BOUNDS = ("peak", "activations")


@dataclasses.dataclass(frozen=True)
class CheckpointChoice:
    """The option chosen for the step's `bounds` ("peak" or "activations") to fit
    `budget_bytes` (`chosen`), the plain step's (`plain`, nothing checkpointed), Chen et
    al.'s √N plan's (`sqrt_n`, None when the model has none), and every option weighed."""

    bounds: str
    budget_bytes: int
    chosen: CheckpointOption
    plain: CheckpointOption
    sqrt_n: CheckpointOption | None
    options: tuple[CheckpointOption, ...]


@dataclasses.dataclass(frozen=True)
class CheckpointOptions:
    """Every option of checkpointing a step's stacks of blocks, weighed (`options`, the
    plain step's first), and Chen et al.'s √N plan's (`sqrt_n`, None when the model has
    none): what `choose_checkpoint` picks from for any budget."""

    options: tuple[CheckpointOption, ...]
    sqrt_n: CheckpointOption | None


def plan_checkpoint(
    profile: Profile, workload: Workload, budget_bytes: int, bounds: str = "peak"
) -> CheckpointChoice:
    """The modules to checkpoint for `workload`'s step to keep its peak (`bounds`
    "peak"), or the activations it keeps for backward ("activations"), within
    `budget_bytes`, at the least recompute time (see the module's docstring). `profile`
    is the plain step's, measured; `workload` the one it measured. Raises ConfigError
    when the model has no stack of repeated blocks, or no option fits the budget."""
    _check_bounds(bounds)
    return choose_checkpoint(checkpoint_options(profile, workload), budget_bytes, bounds)


def _check_bounds(bounds: str) -> None:
    if bounds not in BOUNDS:
        raise ConfigError(
            f"checkpoint: a budget bounds the {' or the '.join(BOUNDS)}, not {bounds!r}."
        )


def checkpoint_options(profile: Profile, workload: Workload) -> CheckpointOptions:
    """Every option of checkpointing `workload`'s stacks of repeated blocks, each with
    its peak and activations (bytes, from a run of the changed step on fake tensors) and
    its recompute time (seconds, from `profile`, the plain step's). Raises ConfigError
    when the model has no stack of repeated blocks."""
    model = workload.model()
    if not isinstance(model, nn.Module):
        raise ConfigError(f"checkpoint: {workload.name!r} builds no nn.Module to checkpoint.")
    stacks = _stacks(model)
    if not stacks:
        raise ConfigError(
            f"checkpoint: {type(model).__name__} has no stack of repeated blocks to choose"
            " from; name the modules to checkpoint instead of giving a memory budget."
        )
    blocks = [block for _, names, _ in stacks for block in names]
    block_s = _block_seconds(profile, workload, blocks)
    block_s |= _block_seconds(profile, workload, [op_level_spec(block) for block in blocks])
    # `ops+K:BLOCK`: what op by op adds, and its first K kinds of product.
    products_s = {block: products_seconds(profile, block, SAVED_OP_NAMES) for block in blocks}
    for block, seconds in products_s.items():
        for k in range(1, len(seconds)):
            block_s[op_level_spec(block, k)] = block_s[op_level_spec(block)] + seconds[k]
    # An `ops+K` option of a stack may recompute as many kinds as its fewest has.
    per_stack = [
        _stack_options(stack, names, merges, min(len(products_s[b]) - 1 for b in names))
        for stack, names, merges in stacks
    ]
    if math.prod(len(o) for o in per_stack) > _MAX_COMBINATIONS:
        per_stack = [[options[0], options[-1]] for options in per_stack]
    memory = _Memory(workload, profile)
    options = []
    for combination in itertools.product(*per_stack):
        modules = tuple(m for spec, _ in combination for m in spec)
        covered = [b for _, blocks_covered in combination for b in blocks_covered]
        peak, activations = memory(modules)
        options.append(
            CheckpointOption(
                modules=modules,
                peak_bytes=peak,
                activations_bytes=activations,
                recompute_s=sum(block_s[b] for b in covered),
            )
        )
    return CheckpointOptions(
        options=tuple(options), sqrt_n=_sqrt_n(workload, memory, block_s, model)
    )


def choose_checkpoint(
    weighed: CheckpointOptions, budget_bytes: int, bounds: str = "peak"
) -> CheckpointChoice:
    """Of `weighed`, the option of least recompute time whose peak (`bounds` "peak") or
    activations ("activations") fit `budget_bytes`. Raises ConfigError when none fits."""
    _check_bounds(bounds)
    options = weighed.options

    def figure(option: CheckpointOption) -> int:
        return option.peak_bytes if bounds == "peak" else option.activations_bytes

    fitting = [o for o in options if figure(o) <= budget_bytes]
    if not fitting:
        least = min(options, key=figure)
        what = ", ".join(least.modules) or "nothing"
        raise ConfigError(
            f"checkpoint: no plan fits {units.size(budget_bytes)} of {bounds}: the lowest is"
            f" {units.size(figure(least))} (checkpointing {what});"
            " checkpointing cannot lower what the weights, gradients and optimizer state take."
        )
    chosen = min(fitting, key=lambda o: (o.recompute_s, figure(o)))
    plain = next(o for o in options if not o.modules)
    return CheckpointChoice(
        bounds=bounds,
        budget_bytes=budget_bytes,
        chosen=chosen,
        plain=plain,
        sqrt_n=weighed.sqrt_n,
        options=options,
    )


def _stacks(model: nn.Module) -> list[tuple[str, list[str], bool]]:
    """(stack, its block names, whether its blocks merge into segments) for every
    outermost stack of repeated blocks."""
    names = [name for name, _ in repeated_stacks(model)]
    # A stack inside another's block (a block's own branches) is covered by that block.
    outermost = [s for s in names if not any(s.startswith(f"{t}.") for t in names if t != s)]
    found = []
    for stack in outermost:
        container = model.get_submodule(stack)
        blocks = [f"{stack}.{child}" if stack else child for child, _ in container.named_children()]
        found.append((stack, blocks, merges_segments(container)))
    return found


# An option of one stack: (the module names or segments it checkpoints, the blocks covered).
_StackOption = tuple[tuple[str, ...], tuple[str, ...]]


def _stack_options(stack: str, blocks: list[str], merges: bool, kinds: int) -> list[_StackOption]:
    """Nothing, first the partial √N coverings, then full coverings by segment size;
    full coverage with single blocks last; then every block op by op with K of its
    `kinds` of product recomputed too (K = 1 … kinds), and with K in the first half of
    the blocks and K − 1 in the rest; then op-level recomputation of the first k
    blocks, for each k (the last option: every block op by op)."""
    n = len(blocks)
    options: list[_StackOption] = [((), ())]
    if not merges:
        options += [(tuple(blocks[:k]), tuple(blocks[:k])) for k in range(1, n + 1)]
    else:
        size = math.ceil(n / math.ceil(math.sqrt(n)))
        for k in range(1, math.ceil(n / size)):
            options.append(_segments(stack, blocks, size, k * size))
        options += [_segments(stack, blocks, s, n) for s in range(n, 0, -1)]
    for products in range(1, kinds + 1):
        for deeper in sorted({(n + 1) // 2, n}):
            specs = tuple(
                op_level_spec(block, products if i < deeper else products - 1)
                for i, block in enumerate(blocks)
            )
            options.append((specs, specs))
    for cover in range(1, n + 1):
        ops = tuple(op_level_spec(block) for block in blocks[:cover])
        options.append((ops, ops))
    return options


def _segments(stack: str, blocks: list[str], size: int, cover: int) -> _StackOption:
    """Segments of `size` blocks over the first `cover` blocks of `stack`."""
    specs = tuple(f"{stack}.{i}:{min(i + size, cover)}" for i in range(0, cover, size))
    return specs, tuple(blocks[:cover])


def _sqrt_n(
    workload: Workload, memory: _Memory, block_s: dict[str, float], model: nn.Module
) -> CheckpointOption | None:
    try:
        plan = checkpoint_plan(model, "auto")
    except ConfigError:
        return None
    peak, activations = memory(("auto",))
    return CheckpointOption(
        modules=("auto",),
        peak_bytes=peak,
        activations_bytes=activations,
        recompute_s=sum(block_s.get(name, 0.0) for name in plan.modules),
    )


class _Memory:
    """A step's (peak, activation) bytes with some modules checkpointed, on fake tensors,
    each set run once."""

    def __init__(self, workload: Workload, profile: Profile) -> None:
        self.workload, self.profile = workload, profile
        self.found: dict[tuple[str, ...], tuple[int, int]] = {}

    def __call__(self, modules: Sequence[str]) -> tuple[int, int]:
        key = tuple(modules)
        if key not in self.found:
            if key == ("auto",):
                changed = checkpoint(self.workload, "auto")
            else:
                changed = checkpoint(self.workload, list(key)) if key else self.workload
            memory = profile_shape_only(
                changed, self.profile.hardware, shape_settings(self.profile)
            ).memory
            assert memory is not None
            self.found[key] = (memory.peak_bytes, memory.activations_bytes)
        return self.found[key]


def _block_seconds(profile: Profile, workload: Workload, blocks: list[str]) -> dict[str, float]:
    """Seconds checkpointing each block adds: its forward again (for `ops:BLOCK`, its ops
    that op-level recomputation does not keep), and checkpoint's own work for it (on this
    device only)."""
    costs = (
        checkpoint_costs(checkpoint(workload, blocks), shape_settings(profile))
        if kernels_here(profile)
        else None
    )
    seconds = {}
    for block in blocks:
        module = block.removeprefix(f"{OPS}:")
        if costs is None:  # measured elsewhere: the recompute alone, from the profile
            kept = SAVED_OP_NAMES if module != block else frozenset()
            seconds[block] = forward_s(profile, module, leaving_out=kept)
        elif module != block:  # op by op: all the region adds, as timed here
            seconds[block] = costs.added_by_module.get(module, 0.0)
        else:
            seconds[block] = forward_s(profile, module) + costs.by_module.get(module, 0.0)
    return seconds
