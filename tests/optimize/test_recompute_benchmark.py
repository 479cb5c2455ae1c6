"""`benchmarks/recompute_vs_compile.py`'s variants of one workload are compiled apart: a
loss function compiled twice is compiled once, and the second variant runs the first
one's graphs (what its first step-time table measured)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import recompute_vs_compile


def _loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).square().mean()


def _compiled_count(wrap: Any) -> int:
    """How many graphs torch.compile makes for `_loss` compiled twice (`wrap(fn, tag)`
    each time) and each called on another model of the same shapes."""
    graphs: list[int] = []

    def backend(gm: torch.fx.GraphModule, inputs: Any) -> Any:
        graphs.append(1)
        return gm.forward

    torch._dynamo.reset()
    x = torch.ones(2, 3)
    for tag in ("a", "b"):
        compiled = torch.compile(wrap(_loss, tag), backend=backend)
        compiled(torch.nn.Linear(3, 4), x)
    torch._dynamo.reset()
    return len(graphs)


def test_one_loss_compiled_twice_is_compiled_once() -> None:
    assert _compiled_count(lambda fn, tag: fn) == 1


def test_distinct_compiles_each_variant_apart() -> None:
    assert _compiled_count(recompute_vs_compile.distinct) == 2


def test_distinct_calls_the_function() -> None:
    model, x = torch.nn.Linear(3, 4), torch.ones(2, 3)
    assert torch.equal(recompute_vs_compile.distinct(_loss, "a")(model, x), _loss(model, x))


def test_a_compiled_plan_recomputing_products_is_measured_in_whole_bytes() -> None:
    """With every kind of product recomputed (the attention too, whose RNG state the
    partitioner saves with a symbolic length), the compiled graphs keep fewer bytes, a
    whole number, and run more FLOPs than op by op alone."""
    from lightspeed.measure.step import StepSettings
    from lightspeed.optimize.checkpointing import checkpoint

    workload = recompute_vs_compile.workload_of("transformer-encoder-tiny", 2)
    figures = {}
    for plan in ("ops", "ops+5"):
        found = recompute_vs_compile.compiled_figures(
            checkpoint(workload, plan), 1.0, StepSettings()
        )
        assert found is not None
        figures[plan] = found
    (kept, flops), (deeper_kept, deeper_flops) = figures["ops"], figures["ops+5"]
    assert isinstance(deeper_kept, int) and 0 < deeper_kept < kept
    assert deeper_flops > flops
    torch._dynamo.reset()
