"""`ncf` and `ncf-tiny`: NeuMF recommenders trained on synthetic implicit feedback.

The model is NeuMF (He et al. 2017, "Neural Collaborative Filtering"): a generalized
matrix factorization (GMF) tower, the element-wise product of a user and an item
embedding, and an MLP tower over the concatenation of separate user and item
embeddings, fused by one linear layer on the concatenation of both towers' outputs into
a logit of "the user interacted with the item", trained with binary cross-entropy
against observed interactions and sampled negatives.

`ncf` is the MLPerf reference configuration (mlcommons/training, `recommendation/
pytorch`: `neumf.py`, which `run_and_time.sh` runs on ml-20m with `-b 2048 --layers 256
256 128 64 -f 64`) on MovieLens-20M (138,493 users, 26,744 items): GMF embeddings of 64,
MLP embeddings of 128 (the first layer size halved), MLP layers 256 -> 256 -> 128 -> 64
with ReLU, batch 2048. That is 31,832,577 parameters, 99.7 % of them in the four
embedding tables; MLPerf publishes no count.

`ncf-tiny` is the paper's smallest MovieLens-1M configuration (6,040 users, 3,706
items, predictive factors 8: GMF embeddings of 8, MLP 32 -> 16 -> 8 on embeddings of
16), batch 256: 234,585 parameters.

Each batch holds one observed (positive) interaction for every 4 sampled negatives, the
paper's and MLPerf's sampling ratio; users and items are drawn uniformly.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.errors import ConfigError
from lightspeed.suite import register
from lightspeed.workload import Workload

NEGATIVES_PER_POSITIVE = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class NeuMFConfig:
    """The shape of a NeuMF: catalogue sizes, GMF factors and MLP layer widths.

    `mlp_layers[0]` is the width of the MLP's input, the concatenated user and item
    embeddings (half each); every later entry is the output width of one layer.
    """

    users: int = 138_493
    items: int = 26_744
    factors: int = 64
    mlp_layers: tuple[int, ...] = (256, 256, 128, 64)

    def __post_init__(self) -> None:
        if self.mlp_layers[0] % 2:
            raise ConfigError(
                f"NeuMFConfig: mlp_layers[0] = {self.mlp_layers[0]} must be even: it is"
                " the user and item embeddings concatenated."
            )


class NeuMF(nn.Module):
    """User and item ids [N] (int64) -> interaction logits [N]."""

    def __init__(self, config: NeuMFConfig) -> None:
        super().__init__()
        embedding = config.mlp_layers[0] // 2
        self.gmf_user = nn.Embedding(config.users, config.factors)
        self.gmf_item = nn.Embedding(config.items, config.factors)
        self.mlp_user = nn.Embedding(config.users, embedding)
        self.mlp_item = nn.Embedding(config.items, embedding)
        widths = config.mlp_layers
        self.mlp = nn.Sequential(
            *(
                module
                for cin, cout in itertools.pairwise(widths)
                for module in (nn.Linear(cin, cout), nn.ReLU())
            )
        )
        self.predict = nn.Linear(config.factors + widths[-1], 1)
        for table in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            # N(0, 0.01) as the paper's and MLPerf's code initialise the embeddings.
            nn.init.normal_(table.weight, std=0.01)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        gmf = self.gmf_user(users) * self.gmf_item(items)  # [N, factors]
        mlp = self.mlp(torch.cat((self.mlp_user(users), self.mlp_item(items)), dim=1))
        return self.predict(torch.cat((gmf, mlp), dim=1)).squeeze(1)


def interaction_batch(
    batch_size: int, config: NeuMFConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded synthetic user ids [batch_size], item ids [batch_size] (int64) and labels
    [batch_size] (float: 1 for the first of every 1 + 4 samples, 0 for its negatives)."""
    generator = torch.Generator().manual_seed(0)
    users = torch.randint(0, config.users, (batch_size,), generator=generator)
    items = torch.randint(0, config.items, (batch_size,), generator=generator)
    labels = (torch.arange(batch_size) % (1 + NEGATIVES_PER_POSITIVE) == 0).float()
    return users, items, labels


def interaction_scores(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """The interaction logits [N] of the batch's (user, item) pairs: what a recommender
    serves, ranking a user's candidate items by them."""
    users, items, _ = batch
    return model(users, items)


def interaction_loss(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """Mean binary cross-entropy in nats of the interaction logits against the labels."""
    _, _, labels = batch
    return F.binary_cross_entropy_with_logits(interaction_scores(model, batch), labels)


def _ncf_workload(name: str, config: NeuMFConfig, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: NeuMF(config),
        batch=lambda n: interaction_batch(n, config),
        loss=interaction_loss,
        batch_size=batch_size,
        # NeuMF takes users and items as two inputs; the batch's first element is users only.
        forward=interaction_scores,
    )


@register("ncf", "NeuMF (MLPerf, 32 M), MovieLens-20M sizes, MLP 256-256-128-64, batch 2048")
def ncf() -> Workload:
    """NeuMF as MLPerf's reference runs it on MovieLens-20M: 31,832,577 parameters."""
    return _ncf_workload("ncf", NeuMFConfig(), batch_size=2048)


@register("ncf-tiny", "NeuMF, MovieLens-1M sizes, factors 8, MLP 32-16-8, batch 256")
def ncf_tiny() -> Workload:
    """The paper's smallest NeuMF on MovieLens-1M: 234,585 parameters."""
    config = NeuMFConfig(users=6_040, items=3_706, factors=8, mlp_layers=(32, 16, 8))
    return _ncf_workload("ncf-tiny", config, batch_size=256)
