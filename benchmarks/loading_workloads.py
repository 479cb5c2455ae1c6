"""Workloads whose data loading is the problem, for `lightspeed tune FILE:NAME --only
loader` and benchmarks/tune_data_loading.py.

- SLEEPY: each sample sleeps 0.5 ms in `__getitem__` (a file read or a network fetch:
  time without CPU), 64 a batch, against a step of a few ms: the loop waits for data
  until enough workers sleep side by side.
- BURNER: each sample burns 0.5 ms of CPU (a JPEG decode, an augmentation), so the
  workers compete with the step for the machine's cores.

Both train the same MLP (256 → 1024 → 1024 → 10) on synthetic samples, with the
DataLoader options the tuner passes; tests/test_loader_tuning.py builds its own loaders
from `Samples` and `workload_on`.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset

from lightspeed.workload import Workload

FEATURES = 256
SAMPLE_S = 5e-4


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """`n` synthetic samples of `FEATURES` features and a class; each costs `sample_s`
    to load, asleep, or with `burn` burning CPU."""

    def __init__(self, n: int, sample_s: float = 0.0, *, burn: bool = False) -> None:
        self.n, self.sample_s, self.burn = n, sample_s, burn

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.burn:
            end = time.perf_counter() + self.sample_s
            while time.perf_counter() < end:
                pass
        elif self.sample_s:
            time.sleep(self.sample_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(FEATURES, generator=g), torch.randint(0, 10, (), generator=g)


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )


def workload_on(
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor]], name: str = "loaded-mlp"
) -> Workload:
    """The MLP trained on batches of 64 from `dataset`, through a shuffled DataLoader."""
    return Workload(
        name=name,
        model=mlp,
        batch=lambda n: (torch.randn(n, FEATURES), torch.randint(0, 10, (n,))),
        loss=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),
        batch_size=64,
        loader=lambda batch_size, **options: DataLoader(
            dataset, batch_size=batch_size, shuffle=True, **options
        ),
    )


SLEEPY = workload_on(Samples(8192, SAMPLE_S), "sleepy-loader")
BURNER = workload_on(Samples(8192, SAMPLE_S, burn=True), "cpu-burning-loader")
