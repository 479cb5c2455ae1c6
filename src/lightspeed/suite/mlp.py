"""`mlp`: a small multi-layer perceptron classifying synthetic feature vectors."""

from __future__ import annotations

import torch
from torch import nn

from lightspeed.suite import register
from lightspeed.workload import Workload


def make_mlp(in_features: int, hidden: int, depth: int, classes: int) -> nn.Sequential:
    """`depth` hidden Linear+ReLU layers of width `hidden`, then a Linear to `classes`."""
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def classification_batch(
    batch_size: int, in_features: int, classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded synthetic inputs [batch_size, in_features] and integer labels [batch_size]."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, in_features, generator=generator)
    y = torch.randint(0, classes, (batch_size,), generator=generator)
    return x, y


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the model's logits against the labels."""
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def _mlp(name: str, in_features: int, hidden: int, depth: int, batch_size: int) -> Workload:
    classes = 10
    return Workload(
        name=name,
        model=lambda: make_mlp(in_features, hidden, depth, classes),
        batch=lambda n: classification_batch(n, in_features, classes),
        loss=classification_loss,
        batch_size=batch_size,
    )


@register("mlp", "MLP 512-1024-1024-1024-10, ReLU, cross-entropy, batch 128")
def mlp() -> Workload:
    """3 hidden layers of 1024 on 512 input features: 2.63 M parameters."""
    return _mlp("mlp", in_features=512, hidden=1024, depth=3, batch_size=128)


@register("mlp-tiny", "MLP 64-128-128-10, ReLU, cross-entropy, batch 32")
def mlp_tiny() -> Workload:
    """2 hidden layers of 128 on 64 input features: 26 k parameters."""
    return _mlp("mlp-tiny", in_features=64, hidden=128, depth=2, batch_size=32)
