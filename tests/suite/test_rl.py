"""A3C: size and FLOPs by arithmetic; its acting step learns what the batched loss does."""

from __future__ import annotations

import copy

import torch

from lightspeed import suite
from lightspeed.facts.records import Phase
from lightspeed.measure.capture import capture_forward, capture_step
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.suite.rl import ROLLOUT, ActorCritic, batched_loss, rollout_batch


def test_parameter_count() -> None:
    # conv 4·16·8·8 + 16 = 4,112; conv 16·32·4·4 + 32 = 8,224;
    # fc (32·9·9 = 2,592)·256 + 256 = 663,808; policy 256·6 + 6 = 1,542; value 257
    # -> 677,943
    assert sum(p.numel() for p in ActorCritic().parameters()) == 677_943


def test_forward_flops_match_the_arithmetic() -> None:
    with torch.device("meta"):
        model = ActorCritic()
    frames = torch.empty(3, 4, 84, 84, device="meta")
    ops = capture_forward(model, frames)
    matmul_like = ("aten::convolution", "aten::addmm")
    flops = sum(o.flops for o in ops if o.name in matmul_like)
    # MACs per frame: conv 4·16·64·(20·20) = 1,638,400; conv 16·32·16·(9·9) = 663,552;
    # fc 2,592·256 = 663,552; policy 256·6 = 1,536; value 256 -> 2,967,296
    assert flops == 2 * 3 * 2_967_296


def test_acting_frame_by_frame_learns_what_the_batched_loss_does() -> None:
    workload = suite.get("a3c")
    torch.manual_seed(0)
    prepared = prepare(workload, StepSettings())
    batched = copy.deepcopy(prepared.model)
    prepared.step()
    loss = batched_loss(batched, rollout_batch(workload.batch_size))
    loss.backward()
    stepped = dict(prepared.model.named_parameters())
    optimizer = workload.optimizer(batched.parameters())
    optimizer.step()
    for name, param in batched.named_parameters():
        torch.testing.assert_close(stepped[name], param, rtol=1e-4, atol=1e-6, msg=name)


def test_the_step_acts_once_per_rollout_step() -> None:
    prepared = prepare(suite.get("a3c"), StepSettings())
    prepared.step()
    ops = capture_step(prepared)
    first_convs = [o for o in ops if o.phase is Phase.FORWARD and o.name == "aten::convolution"]
    # Two convs per act, each on the 16 actors' frames only.
    assert len(first_convs) == 2 * ROLLOUT
    assert all(o.input_shapes[0][0] == 16 for o in first_convs)


def test_a_batch_that_is_not_whole_rollouts_still_acts_in_rollout_steps() -> None:
    workload = suite.get("a3c-tiny").with_batch_size(7)
    prepared = prepare(workload, StepSettings())
    prepared.step()
    convs = [
        o
        for o in capture_step(prepared)
        if o.phase is Phase.FORWARD and o.name == "aten::convolution"
    ]
    assert [o.input_shapes[0][0] for o in convs[::2]] == [2, 2, 1, 1, 1]
