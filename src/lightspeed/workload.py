"""`Workload`: the one description of "a training step to study", and loading targets.

A target on the command line is a built-in suite name (`mlp`) or `path/to/file.py:attr`,
where `attr` is a `Workload` or a zero-argument callable that returns one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from lightspeed.errors import ConfigError, TargetError, WorkloadError

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


def load_target(target: str) -> Workload:
    """The Workload named by `target`: a suite name or `path/to/file.py:attr`."""
    from lightspeed import suite

    if ":" in target or target.endswith(".py"):
        return _load_from_file(target)
    return suite.get(target)


def _load_from_file(target: str) -> Workload:
    path_text, sep, attr = target.rpartition(":")
    if not sep:
        raise TargetError(
            f"{target!r} names a file but no attribute; write {target}:NAME, where NAME is a"
            " Workload or a function returning one."
        )
    path = Path(path_text)
    if not path.is_file():
        raise TargetError(f"{path_text!r}: no such file; check the path of the target.")
    if not attr:
        raise TargetError(f"{target!r} names no attribute after ':'; write {path_text}:NAME.")
    module = _import_file(path)
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        hint = f" It defines: {', '.join(public[:12])}." if public else ""
        raise TargetError(f"{path_text!r} has no attribute {attr!r}.{hint}")
    value = getattr(module, attr)
    if isinstance(value, Workload):
        return value
    if callable(value) and not isinstance(value, type):
        try:
            made = value()
        except Exception as exc:
            raise WorkloadError(
                f"{target}: calling {attr}() raised {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(made, Workload):
            return made
        raise TargetError(
            f"{target}: {attr}() returned a {type(made).__name__}, not a lightspeed.Workload."
        )
    raise TargetError(
        f"{target}: {attr!r} is a {type(value).__name__}, not a lightspeed.Workload or a"
        " zero-argument function returning one."
    )


def _import_file(path: Path) -> Any:
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    module_name = f"lightspeed_target_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise TargetError(f"{path}: not a Python file that can be imported.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise TargetError(f"importing {path} raised {type(exc).__name__}: {exc}") from exc
    return module
