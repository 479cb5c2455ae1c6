"""Models served in the serving benchmarks, outside the suite.

`wide`: a 12-layer MLP 2048 wide on 256 features. At batch 1 each layer is a
matrix-vector product that reads its 16 MiB of weights for 4 MFLOP, so ℓ(1) is the
weights' trip from memory (≈ 16 ms on one core of the 2-core Xeon); a batch of 64
reads them once for 64 samples. The overhead-bound shape Nexus batches for (and a
decoder's step, a recommender's MLP), with ℓ(b) far from proportional to b.
"""

from __future__ import annotations

import torch

from lightspeed import Workload

FEATURES = 256


def _model(width: int, layers: int) -> torch.nn.Module:
    parts: list[torch.nn.Module] = [torch.nn.Linear(FEATURES, width), torch.nn.ReLU()]
    for _ in range(layers - 1):
        parts += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    parts.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*parts)


def _batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (
        torch.randn(n, FEATURES, generator=generator),
        torch.randint(0, 10, (n,), generator=generator),
    )


def _loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])


wide = Workload(
    name="wide-mlp-2048x12",
    model=lambda: _model(2048, 12),
    batch=_batch,
    loss=_loss,
)
