"""What activation checkpointing itself costs, beyond the recompute, region by region.

`torch.utils.checkpoint` (non-reentrant) does work of its own for every region it
enters (saving the RNG state, setting up the recompute) and for every tensor an op
inside saves for backward: packed in forward, packed again in the recompute, unpacked
in backward, with Python in each, some of it inside the ops that save. On a CPU that
is about as much again as the region's forward — work none of the plain step's ops
show. Like a kernel whose time a ceiling cannot tell (`measure.op_bench`), it is timed
on the device: one step of the checkpointed workload runs with every region it enters
timed alone on the region's own inputs — forward and backward plainly, the same under
checkpoint, and forward alone (the recompute, which a prediction already counts) — and
the region's cost is checkpointed − plain − forward (medians over interleaved rounds).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from lightspeed import progress
from lightspeed.measure.device import synchronizer
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.optimize.checkpointing import observing_regions, recomputed_products
from lightspeed.workload import Workload

# Rounds of (plain, checkpointed, forward) a region is timed in, after one warm-up.
ROUNDS = 9


@dataclasses.dataclass(frozen=True)
class RegionCosts:
    """Seconds checkpoint's own work adds to one training step: `seconds`, summed over
    the `regions` it entered; `by_module`, each region's, by the name of the (first)
    module it runs; `added_by_module`, all a region adds to its plain forward and backward,
    its recompute included (what an op-level region costs: it recomputes part of its
    forward, which no profile's op says); `products`, by module, the regions recomputed
    op by op (`op_level`), whose figure in `by_module` and `seconds` is that of a whole
    recompute (0, or near it), and how many kinds of product each recomputes too
    (`ops+K`)."""

    regions: int
    seconds: float
    by_module: dict[str, float] = dataclasses.field(default_factory=dict)
    added_by_module: dict[str, float] = dataclasses.field(default_factory=dict)
    products: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def op_level(self) -> frozenset[str]:
        """The modules of the regions recomputed op by op."""
        return frozenset(self.products)


def checkpoint_costs(checkpointed: Workload, settings: StepSettings) -> RegionCosts:
    """Checkpoint's own cost in one step of `checkpointed` on `settings`' device (see the
    module's docstring): the step runs for real, once to warm up and once observed."""
    sync = synchronizer(settings.device)
    costs: list[tuple[str, float, float]] = []
    products_by_module: dict[str, int] = {}
    names: dict[int, str] = {}

    def observe(
        modules: Sequence[nn.Module],
        forward: Callable[..., Any],
        run_checkpointed: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        cost, added = _region_cost(forward, run_checkpointed, args, kwargs, sync)
        name = names.get(id(modules[0]), "") if modules else ""
        costs.append((name, cost, added))
        products = recomputed_products(modules[0]) if modules else None
        if products is not None:
            products_by_module[name] = products
        return run_checkpointed(*args, **kwargs)

    with progress.stage("timing checkpoint's own work, region by region"):
        prepared = prepare(checkpointed, settings)
        names.update((id(module), name) for name, module in prepared.model.named_modules())
        prepared.step()
        with observing_regions(observe):
            prepared.step()
    by_module: dict[str, float] = {}
    added_by_module: dict[str, float] = {}
    for name, cost, added in costs:
        by_module[name] = by_module.get(name, 0.0) + cost
        added_by_module[name] = added_by_module.get(name, 0.0) + added
    return RegionCosts(
        regions=len(costs),
        seconds=sum(cost for _, cost, _ in costs),
        by_module=by_module,
        added_by_module=added_by_module,
        products=products_by_module,
    )


def _region_cost(
    forward: Callable[..., Any],
    run_checkpointed: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    sync: Callable[[], None],
) -> tuple[float, float]:
    """Seconds one region's checkpoint adds beyond its plain step and its recompute, and
    beyond its plain step alone, on inputs detached from the step (their gradients go
    nowhere)."""
    args, kwargs = pytree.tree_map_only(torch.Tensor, _detached, (args, kwargs))

    def plain() -> None:
        _backward(forward(*args, **kwargs))

    def checkpointed() -> None:
        _backward(run_checkpointed(*args, **kwargs))

    def recompute() -> None:
        forward(*args, **kwargs)

    runs = (plain, checkpointed, recompute)
    times: dict[Callable[[], None], list[float]] = {run: [] for run in runs}
    for run in runs:
        run()
    for _ in range(ROUNDS):
        for run in runs:
            sync()
            start = time.perf_counter()
            run()
            sync()
            times[run].append(time.perf_counter() - start)
    medians = {run: statistics.median(found) for run, found in times.items()}
    added = max(medians[checkpointed] - medians[plain], 0.0)
    return max(added - medians[recompute], 0.0), added


def _detached(tensor: torch.Tensor) -> torch.Tensor:
    leaf = tensor.detach()
    return leaf.requires_grad_() if tensor.requires_grad else leaf


def _backward(output: Any) -> None:
    """Backward from every floating output that needs a gradient, as if each were summed
    into the loss."""
    outputs = [
        t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    if outputs:
        torch.autograd.backward([t.sum() for t in outputs])
