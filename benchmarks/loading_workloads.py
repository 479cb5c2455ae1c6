"""Workloads whose data loading is the problem, for `lightspeed tune FILE:NAME --only
loader` and benchmarks/tune_data_loading.py.

- SLEEPY: each sample sleeps 0.5 ms in `__getitem__` (a file read or a network fetch:
  time without CPU), 64 a batch, against a step of a few ms: the loop waits for data
  until enough workers sleep side by side.
- BURNER: each sample burns 0.5 ms of CPU (a JPEG decode, an augmentation), so the
  workers compete with the step for the machine's cores.

Both train the same MLP (256 → 1024 → 1024 → 10) on synthetic samples, with the
DataLoader options the tuner passes.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset

from lightspeed.workload import Workload

FEATURES = 256
SAMPLE_S = 5e-4


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Synthetic samples that cost `SAMPLE_S` each to load: asleep, or burning CPU."""

    def __init__(self, n: int, *, burn: bool) -> None:
        self.n, self.burn = n, burn

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.burn:
            end = time.perf_counter() + SAMPLE_S
            spin = 0
            while time.perf_counter() < end:
                spin += 1
        else:
            time.sleep(SAMPLE_S)
        g = torch.Generator().manual_seed(i)
        return torch.randn(FEATURES, generator=g), torch.randint(0, 10, (), generator=g)


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )


def _workload(name: str, *, burn: bool) -> Workload:
    dataset = Samples(8192, burn=burn)
    return Workload(
        name=name,
        model=_mlp,
        batch=lambda n: (torch.randn(n, FEATURES), torch.randint(0, 10, (n,))),
        loss=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),
        batch_size=64,
        loader=lambda batch_size, **options: DataLoader(
            dataset, batch_size=batch_size, shuffle=True, **options
        ),
    )


SLEEPY = _workload("sleepy-loader", burn=False)
BURNER = _workload("cpu-burning-loader", burn=True)
