"""`Workload`: the one description of "a training step to study".

`targets.load_target` turns what a user names on the command line into one.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from lightspeed.errors import ConfigError
from lightspeed.facts.records import Phase

ModelFactory = Callable[[], torch.nn.Module]
BatchFactory = Callable[[int], Any]
LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]
OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]
# Entered around each part of a training step, so observers know which phase runs.
PhaseHook = Callable[[Phase], contextlib.AbstractContextManager[object]]
# A whole training step written by the workload: (model, batch, optimizer, phase) -> loss;
# the optimizer is the one `optimizer` builds, or the named ones `optimizers` builds.
StepFn = Callable[[torch.nn.Module, Any, Any, PhaseHook], torch.Tensor]
# Named optimizers built from the model, for a step that updates its parts apart.
OptimizersFactory = Callable[[torch.nn.Module], Mapping[str, torch.optim.Optimizer]]
# (batch_size, **DataLoader options) -> the batches of an epoch, as a DataLoader yields them.
LoaderFactory = Callable[..., Iterable[Any]]
# forward(model, batch) -> outputs: one inference call on a batch as `batch` makes it.
ForwardFn = Callable[[torch.nn.Module, Any], Any]


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

    `step(model, batch, optimizer, phase)`, when given, is the whole training step
    instead (a GAN's discriminator and generator updates, say): it runs each part
    inside `with phase(Phase.FORWARD):`, `BACKWARD` or `OPTIMIZER`, so that every op
    is attributed to its phase, and returns a scalar loss tensor (only checked and
    kept). `loss` is still the model's loss on a batch, without an update. Such a step
    may update parts of the model with optimizers of their own: `optimizers(model)`
    returns them by name (`{"generator": Adam(...), "discriminator": SGD(...)}`) and
    the step receives that mapping in place of the one `optimizer`.

    `loader(batch_size, **options)`, when given, builds the workload's real input
    pipeline: an iterable of batches like the ones `batch` makes (a
    `torch.utils.data.DataLoader`, usually), built with the DataLoader keyword options
    it is called with (`num_workers`, `pin_memory`, `persistent_workers`,
    `prefetch_factor`), so that `lightspeed tune` can measure the step's wait for data
    under each. A step measured alone still uses `batch`.

    `jobs`: how many training jobs one step trains (K after `fuse(workload, k=K)`), each
    on `batch_size` samples, so a step takes `jobs × batch_size` samples.

    `forward(model, batch)`, when given, is one inference call on a batch as `batch`
    makes it (labels and all), for a model whose inference is not `model(inputs)`;
    without it, serving calls the model on the batch's inputs
    (`workload.inference.inputs_of`).

    `target`: the TARGET it was loaded from (`workload.targets.load_target`: a suite name,
    `hf:…`, or a file's absolute path and attribute), so a saved profile can load it
    again; None for a workload built in code.
    """

    name: str
    model: ModelFactory
    batch: BatchFactory
    loss: LossFn
    optimizer: OptimizerFactory = default_optimizer
    batch_size: int = 32
    tokens_per_sample: int | None = None
    step: StepFn | None = None
    optimizers: OptimizersFactory | None = None
    loader: LoaderFactory | None = None
    target: str | None = None
    jobs: int = 1
    forward: ForwardFn | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("Workload(name=...) must be a non-empty string.")
        for field in ("model", "batch", "loss", "optimizer"):
            if not callable(getattr(self, field)):
                raise ConfigError(f"Workload {self.name!r}: {field} must be callable.")
        for field in ("step", "optimizers", "loader", "forward"):
            if getattr(self, field) is not None and not callable(getattr(self, field)):
                raise ConfigError(f"Workload {self.name!r}: {field} must be callable or None.")
        if self.optimizers is not None and self.step is None:
            raise ConfigError(
                f"Workload {self.name!r}: optimizers(model) needs a step of its own that"
                " uses them (step=…)."
            )
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ConfigError(f"Workload {self.name!r}: batch_size must be an int.")
        if self.batch_size < 1:
            raise ConfigError(
                f"Workload {self.name!r}: batch size {self.batch_size} must be at least 1"
                " (--batch-size)."
            )
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ConfigError(f"Workload {self.name!r}: jobs must be an int of at least 1.")
        if self.tokens_per_sample is not None and self.tokens_per_sample < 1:
            raise ConfigError(f"Workload {self.name!r}: tokens_per_sample must be at least 1.")

    def with_batch_size(self, batch_size: int) -> Workload:
        """The same workload with another batch size."""
        return dataclasses.replace(self, batch_size=batch_size)
