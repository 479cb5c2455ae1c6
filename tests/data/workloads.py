"""Workload targets for the loading and error tests (`tests/data/workloads.py:NAME`)."""

from __future__ import annotations

import torch
from torch import nn

from lightspeed import Workload


def _batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 8, generator=g), torch.randn(n, 2, generator=g)


def _mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


tiny = Workload(name="tiny", model=lambda: nn.Linear(8, 2), batch=_batch, loss=_mse, batch_size=4)


def make_tiny() -> Workload:
    return tiny


def _broken_model() -> nn.Module:
    raise ValueError("no such layer size")


broken_model = Workload(name="broken-model", model=_broken_model, batch=_batch, loss=_mse)


def _broken_loss(model: nn.Module, batch: object) -> torch.Tensor:
    raise KeyError("labels")


broken_loss = Workload(
    name="broken-loss", model=lambda: nn.Linear(8, 2), batch=_batch, loss=_broken_loss
)

vector_loss = Workload(
    name="vector-loss",
    model=lambda: nn.Linear(8, 2),
    batch=_batch,
    loss=lambda m, b: m(b[0]).sum(dim=0),
)


def _huge_batch(n: int) -> torch.Tensor:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


out_of_memory = Workload(name="oom", model=lambda: nn.Linear(8, 2), batch=_huge_batch, loss=_mse)

not_a_workload = 42


class _FailLater:
    """A loss that works for the timing run, then raises once capture begins."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is not None:
            raise RuntimeError("fails under observation")
        return _mse(model, batch)


fails_on_fifth_step = Workload(
    name="fails-later", model=lambda: nn.Linear(8, 2), batch=_batch, loss=_FailLater(), batch_size=4
)
