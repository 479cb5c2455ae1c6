"""`Workload`: the one description of "a training step to study".

`targets.load_target` turns what a user names on the command line into one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from lightspeed.errors import ConfigError

ModelFactory = Callable[[], torch.nn.Module]
BatchFactory = Callable[[int], Any]
LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]
OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


def default_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW with learning rate 1e-3: the optimizer a Workload uses unless told otherwise."""
    return torch.optim.AdamW(params, lr=1e-3)


@dataclasses.dataclass(frozen=True)
class Workload:
    """A training step: build the model, make a batch, compute the loss, step the optimizer.

    One step is `optimizer.zero_grad()`, `loss(model, batch).backward()`,
    `optimizer.step()`. `batch(batch_size)` returns the batch on the CPU (a tensor, or
    tuples, lists and dicts of them); lightspeed moves it to the device.
    `tokens_per_sample` (tokens in one sample, for sequence models) enables token
    throughput and MFU.
    """

    name: str
    model: ModelFactory
    batch: BatchFactory
    loss: LossFn
    optimizer: OptimizerFactory = default_optimizer
    batch_size: int = 32
    tokens_per_sample: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("Workload(name=...) must be a non-empty string.")
        for field in ("model", "batch", "loss", "optimizer"):
            if not callable(getattr(self, field)):
                raise ConfigError(f"Workload {self.name!r}: {field} must be callable.")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ConfigError(f"Workload {self.name!r}: batch_size must be an int.")
        if self.batch_size < 1:
            raise ConfigError(
                f"Workload {self.name!r}: batch size {self.batch_size} must be at least 1"
                " (--batch-size)."
            )
        if self.tokens_per_sample is not None and self.tokens_per_sample < 1:
            raise ConfigError(f"Workload {self.name!r}: tokens_per_sample must be at least 1.")

    def with_batch_size(self, batch_size: int) -> Workload:
        """The same workload with another batch size."""
        return dataclasses.replace(self, batch_size=batch_size)
