"""`a3c` and `a3c-tiny`: an A3C actor-critic update on Atari-shaped frames.

The network is the one A3C used on Atari (Mnih et al. 2016, "Asynchronous Methods for
Deep Reinforcement Learning", feed-forward agent; the architecture of Mnih et al. 2013):
a stack of 4 preprocessed 84x84 grey frames, conv 16 8x8 stride 4, conv 32 4x4 stride
2, a 256-unit fully connected layer, ReLUs, then a softmax policy over the game's
actions (6, Pong's) and a linear value. RMSProp at lr 7e-4, alpha 0.99, eps 0.1 (the
paper's shared RMSProp, here unshared).

An update acts before it learns: each actor runs the policy for t_max = 5 steps, one
frame at a time, keeping the graph, then one n-step actor-critic loss over the rollout
(policy gradient with the value as baseline, 0.5 x the value's squared error, an
entropy bonus of 0.01) goes backward. That is the workload's own `step`: five small
forwards, the launch-bound pattern of RL training, not one batched forward. The
batch is `actors x 5` frames in time-major order, with the actions taken and
synthetic n-step returns; the emulator is not run (nothing here needs it to time a
step).

`a3c` is 16 actors, the paper's thread count, updating together as its synchronous
variant does; `a3c-tiny` is one actor-learner's own update (5 frames).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.facts.records import Phase
from lightspeed.suite import register
from lightspeed.workload import PhaseHook, Workload

ROLLOUT = 5  # t_max
ACTIONS = 6
ENTROPY_WEIGHT = 0.01

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class ActorCritic(nn.Module):
    """Frames [N, 4, 84, 84] in [0, 1] -> (action logits [N, actions], values [N])."""

    def __init__(self, actions: int = ACTIONS) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(4, 16, 8, stride=4),  # -> [N, 16, 20, 20]
            nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2),  # -> [N, 32, 9, 9]
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 9 * 9, 256),
            nn.ReLU(),
        )
        self.policy = nn.Linear(256, actions)
        self.value = nn.Linear(256, 1)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.body(frames)
        return self.policy(hidden), self.value(hidden).squeeze(-1)


def rollout_batch(batch_size: int) -> Batch:
    """Seeded frames [batch_size, 4, 84, 84], actions [batch_size] and n-step returns
    [batch_size], time-major: the first batch_size / 5 rows are the actors' first step."""
    generator = torch.Generator().manual_seed(0)
    frames = torch.rand(batch_size, 4, 84, 84, generator=generator)
    actions = torch.randint(0, ACTIONS, (batch_size,), generator=generator)
    returns = torch.randn(batch_size, generator=generator)
    return frames, actions, returns


def actor_critic_loss(
    logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor
) -> torch.Tensor:
    """A3C's loss summed over the rollout's frames: policy gradient with the value as
    baseline, minus the entropy bonus, plus half the value's squared error."""
    log_probs = F.log_softmax(logits, dim=-1)
    taken = log_probs.gather(1, actions.unsqueeze(1)).squeeze(1)
    advantage = returns - values
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    policy = -(taken * advantage.detach()).sum() - ENTROPY_WEIGHT * entropy.sum()
    return policy + 0.5 * advantage.square().sum()


def batched_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The update's loss with the rollout's frames in one forward (no acting)."""
    frames, actions, returns = batch
    logits, values = model(frames)
    return actor_critic_loss(logits, values, actions, returns)


def a3c_step(
    model: nn.Module, batch: Batch, optimizer: torch.optim.Optimizer, phase: PhaseHook
) -> torch.Tensor:
    """Act for `ROLLOUT` steps, a frame per actor each, then learn from the rollout.

    A batch that is not whole rollouts (`--batch-size 7`) acts in as equal steps as it
    can; one of fewer than `ROLLOUT` frames acts once per frame."""
    frames, actions, returns = batch
    with phase(Phase.OPTIMIZER):
        optimizer.zero_grad(set_to_none=True)
    with phase(Phase.FORWARD):
        steps = [model(f) for f in frames.tensor_split(min(ROLLOUT, len(frames)))]
        logits = torch.cat([s[0] for s in steps])
        values = torch.cat([s[1] for s in steps])
        loss = actor_critic_loss(logits, values, actions, returns)
    with phase(Phase.BACKWARD):
        loss.backward()
    with phase(Phase.OPTIMIZER):
        optimizer.step()
    return loss.detach()


def a3c_optimizer(params: Any) -> torch.optim.Optimizer:
    """RMSProp at lr 7e-4, alpha 0.99, eps 0.1: A3C's settings."""
    return torch.optim.RMSprop(params, lr=7e-4, alpha=0.99, eps=0.1)


def _a3c(name: str, actors: int) -> Workload:
    return Workload(
        name=name,
        model=ActorCritic,
        batch=rollout_batch,
        loss=batched_loss,
        optimizer=a3c_optimizer,
        batch_size=actors * ROLLOUT,
        step=a3c_step,
    )


@register("a3c", "A3C actor-critic, 84x84x4 frames, 16 actors x 5-step rollouts")
def a3c() -> Workload:
    """16 actors' 5-step rollouts, acted frame by frame, then one update."""
    return _a3c("a3c", 16)


@register("a3c-tiny", "A3C actor-critic, one actor-learner's 5-step update")
def a3c_tiny() -> Workload:
    """One actor-learner's update: 5 frames acted one at a time."""
    return _a3c("a3c-tiny", 1)
