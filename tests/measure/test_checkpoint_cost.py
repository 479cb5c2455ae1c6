"""Checkpoint's own cost, timed region by region in one real step."""

from __future__ import annotations

import math

import torch

from lightspeed.measure.checkpoint_cost import _backward, checkpoint_costs
from lightspeed.measure.step import StepSettings
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.suite import get


def test_every_region_of_a_step_is_timed() -> None:
    # The √2 plan checkpoints each of gpt2-tiny's two blocks; one named block is one.
    both = checkpoint_costs(checkpoint(get("gpt2-tiny"), "auto"), StepSettings())
    assert both.regions == 2
    assert set(both.by_module) == {"blocks.0", "blocks.1"}
    assert sum(both.by_module.values()) == both.seconds
    assert math.isfinite(both.seconds) and both.seconds >= 0
    one = checkpoint_costs(checkpoint(get("gpt2-tiny"), ["blocks.0"]), StepSettings())
    assert one.regions == 1


def test_backward_reaches_every_output_that_needs_a_gradient() -> None:
    x = torch.ones(3, requires_grad=True)
    _backward({"a": x * 2, "b": (x * 3, torch.zeros(2)), "c": "text"})
    assert x.grad is not None
    assert torch.equal(x.grad, torch.full((3,), 5.0))
