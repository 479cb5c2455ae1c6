"""A model that takes 20 ms a batch whatever its size (it sleeps): requests are still in
flight when a test stops its server."""

from __future__ import annotations

import time

import torch

from lightspeed import Workload


class Slow(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.020)
        return 2 * x


def batch(n: int) -> torch.Tensor:
    return torch.ones(n, 4)


slow = Workload(
    name="slow",
    model=Slow,
    batch=batch,
    loss=lambda model, b: model(b).sum(),
    optimizer=lambda model: torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1),
)
