"""`pointnet` and `pointnet-tiny`: PointNet classifying synthetic point clouds.

The model is PointNet's classification network (Qi et al. 2017, "PointNet: Deep
Learning on Point Sets for 3D Classification and Segmentation", Figure 2 and the
supplementary's network details), with the layers of the authors' code
(charlesq34/pointnet, `models/pointnet_cls.py` and `transform_nets.py`):

- an input transform net (T-Net) predicts a 3x3 matrix that multiplies every point;
- a shared MLP (64, 64) lifts each point to 64 features, and a feature T-Net predicts a
  64x64 matrix that multiplies them;
- a shared MLP (64, 128, 1024) and a max-pool over the points give a global feature;
- an MLP (512, 256, classes), with dropout 0.3 after each hidden layer, classifies it.

Shared MLPs are 1x1 convolutions; every layer but the last of each T-Net and of the
classifier has batch norm and ReLU. Each T-Net is a shared MLP (64, 128, 1024), a
max-pool and an MLP (512, 256, k·k) whose output starts as the identity. The loss adds
the paper's regulariser 0.001 · ||I − A·Aᵀ||²_F on the 64x64 feature transform A,
averaged over the batch (the authors' code sums half of it over the batch).

With 40 classes that is 3,480,049 parameters, the paper's 3.5 M (Table 6), and 448.0 M
multiply-accumulates per cloud of 1024 points, near the paper's 440 M "FLOPs" (Table
6), which must count a multiply-add once (2 FLOPs per MAC would make 896 M).

The data imitate ModelNet40: clouds of 1024 points inside the unit sphere, 40 classes,
batch 32 (the authors' default). `pointnet-tiny` divides every width by 4, uses 128 points,
10 classes and batch 8.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.suite import register
from lightspeed.workload import Workload

ORTHOGONALITY_WEIGHT = 0.001  # the paper's weight of the feature-transform regulariser
DROPOUT = 0.3  # the authors' code keeps 70 % of each hidden layer of the classifier


@dataclasses.dataclass(frozen=True, kw_only=True)
class PointNetConfig:
    """The shape of a PointNet: points per cloud, classes and layer widths.

    `point_features` and `global_features` are the output widths of the shared MLPs
    before and after the feature transform; `classifier` the hidden widths of the MLP on
    the global feature. Each T-Net has the shared MLP `tnet_point` and the MLP
    `tnet_hidden`.
    """

    points: int = 1024
    classes: int = 40
    point_features: tuple[int, ...] = (64, 64)
    global_features: tuple[int, ...] = (64, 128, 1024)
    classifier: tuple[int, ...] = (512, 256)
    tnet_point: tuple[int, ...] = (64, 128, 1024)
    tnet_hidden: tuple[int, ...] = (512, 256)


def _shared_mlp(cin: int, widths: tuple[int, ...]) -> nn.Sequential:
    """Per-point layers (1x1 conv, batch norm, ReLU): [N, cin, P] -> [N, widths[-1], P]."""
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise((cin, *widths)):
        layers += [nn.Conv1d(a, b, 1), nn.BatchNorm1d(b), nn.ReLU()]
    return nn.Sequential(*layers)


def _mlp(cin: int, widths: tuple[int, ...], dropout: float = 0.0) -> nn.Sequential:
    """Linear, batch norm, ReLU (and dropout if `dropout` > 0) per width:
    [N, cin] -> [N, widths[-1]]."""
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise((cin, *widths)):
        layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU()]
        layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers)


class TNet(nn.Module):
    """Predicts a k x k transform from a cloud's features: [N, k, P] -> [N, k, k]."""

    identity: torch.Tensor

    def __init__(self, k: int, config: PointNetConfig) -> None:
        super().__init__()
        self.k = k
        self.points = _shared_mlp(k, config.tnet_point)
        self.hidden = _mlp(config.tnet_point[-1], config.tnet_hidden)
        self.transform = nn.Linear(config.tnet_hidden[-1], k * k)
        # The authors start every T-Net at the identity: bias I (flattened), weights 0.
        # Small weights instead of 0 let the gradient reach the layers below at once.
        nn.init.normal_(self.transform.weight, std=1e-3)
        with torch.no_grad():
            self.transform.bias.copy_(torch.eye(k).flatten())
        # I, to subtract in the orthogonality penalty; built once, not every step.
        self.register_buffer("identity", torch.eye(k), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.points(x).amax(dim=2)  # max-pool over the points: [N, C]
        return self.transform(self.hidden(features)).view(-1, self.k, self.k)

    def orthogonality_penalty(self, transform: torch.Tensor) -> torch.Tensor:
        """||I − A·Aᵀ||²_F of transforms A [N, k, k], averaged over the batch."""
        gram = torch.bmm(transform, transform.transpose(1, 2))
        return (self.identity - gram).square().sum(dim=(1, 2)).mean()


class PointNet(nn.Module):
    """Point clouds [N, P, 3] -> class logits [N, classes] and the feature transform's
    orthogonality penalty (a scalar)."""

    def __init__(self, config: PointNetConfig) -> None:
        super().__init__()
        self.input_transform = TNet(3, config)
        self.point_features = _shared_mlp(3, config.point_features)
        features = config.point_features[-1]
        self.feature_transform = TNet(features, config)
        self.global_features = _shared_mlp(features, config.global_features)
        self.classifier = nn.Sequential(
            _mlp(config.global_features[-1], config.classifier, DROPOUT),
            nn.Linear(config.classifier[-1], config.classes),
        )

    def forward(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = points.transpose(1, 2)  # channels first for the 1x1 convs: [N, 3, P]
        # Each point x becomes Aᵀx: [N, k, k]ᵀ @ [N, k, P].
        x = torch.bmm(self.input_transform(x).transpose(1, 2), x)
        x = self.point_features(x)  # [N, 64, P]
        transform = self.feature_transform(x)
        x = torch.bmm(transform.transpose(1, 2), x)
        x = self.global_features(x).amax(dim=2)  # the global feature: [N, 1024]
        penalty = self.feature_transform.orthogonality_penalty(transform)
        return self.classifier(x), penalty


def point_cloud_batch(batch_size: int, config: PointNetConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded synthetic clouds [batch_size, points, 3], each scaled into the unit sphere
    as ModelNet40's are, and class labels [batch_size]."""
    generator = torch.Generator().manual_seed(0)
    points = torch.randn(batch_size, config.points, 3, generator=generator)
    points = points / points.norm(dim=2, keepdim=True).amax(dim=1, keepdim=True)
    labels = torch.randint(0, config.classes, (batch_size,), generator=generator)
    return points, labels


def pointnet_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy in nats of the logits against the labels + 0.001 · the feature
    transform's orthogonality penalty."""
    points, labels = batch
    logits, penalty = model(points)
    return F.cross_entropy(logits, labels) + ORTHOGONALITY_WEIGHT * penalty


def _pointnet_workload(name: str, config: PointNetConfig, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: PointNet(config),
        batch=lambda n: point_cloud_batch(n, config),
        loss=pointnet_loss,
        batch_size=batch_size,
    )


@register("pointnet", "PointNet (3.5 M), 1024 synthetic points per cloud, 40 classes, batch 32")
def pointnet() -> Workload:
    """PointNet with both T-Nets on ModelNet40-sized clouds: 3,480,049 parameters."""
    return _pointnet_workload("pointnet", PointNetConfig(), batch_size=32)


@register("pointnet-tiny", "PointNet at 1/4 width, 128 synthetic points, 10 classes, batch 8")
def pointnet_tiny() -> Workload:
    """PointNet with every width divided by 4, 128 points, 10 classes: 0.17 M parameters."""
    config = PointNetConfig(
        points=128,
        classes=10,
        point_features=(16, 16),
        global_features=(16, 32, 256),
        classifier=(128, 64),
        tnet_point=(16, 32, 256),
        tnet_hidden=(128, 64),
    )
    return _pointnet_workload("pointnet-tiny", config, batch_size=8)
