"""`Workload → Workload` transforms that change how a step runs, not what it computes.

Each transform returns a new Workload whose name records the change and whose
docstring names its source, its preconditions and the equivalence it keeps:

- `autocast` (`precision`): the forward and loss under `torch.autocast` (mixed
  precision), fp16 with a dynamic loss scaler.
- `checkpoint` (`checkpointing`): activation checkpointing of chosen modules, planned by
  `checkpoint_plan.checkpoint_plan` (√N segments of the main stack of blocks by
  default); `lightspeed.workflows.tune.checkpoint_for_budget` plans one for a memory budget.
- `gist` (`encodings`): lossless encodings of the activations ReLU, ReLU6, LeakyReLU
  and max-pooling keep for backward (a bit an element; a byte a pooling window).
- `scan_backward` (`bppsa`): an `nn.RNN`'s backward as a parallel scan over its
  transposed Jacobians (BPPSA): 2⌈log₂(T + 1)⌉ levels of batched products instead of T
  dependent steps; equal to autograd's gradients within rounding.
- `compiled` (`compile`): the model under `torch.compile` (Inductor); equal within
  rounding.
- `fuse` (`fusion`): K training jobs of one model as one job (HFTA), each job with its
  own hyper-parameters (`FusedOptimizer`, `fusion.optimizer`), and a loss scale of its own
  for fp16 (`JobLossScaler`); each trains as it would alone.
- `BucketBatchSampler` (`bucketing`): batches of samples of similar length, for
  sequences padded to the longest in their batch (`padding_waste` says what padding
  costs).

And one advisor, which changes nothing itself: `padding_suggestions` (`padding`), the
layer sizes tensor cores (or AMX) cannot fully use in mixed precision, and what to pad
them to.

Every name loads its own module on first use (`lightspeed.optimize.autocast(workload,
"bf16")`), so that using one transform does not import the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name → the module of this package that defines it.
_EXPORTS = {
    "autocast": "precision",
    "LossScaling": "precision",
    "checkpoint": "checkpointing",
    "scan_backward": "bppsa",
    "checkpoint_model": "checkpointing",
    "gist": "encodings",
    "gist_model": "encodings",
    "compiled": "compile",
    "fuse": "fusion.fuse",
    "FusedModel": "fusion.fuse",
    "FusedOptimizer": "fusion.optimizer",
    "JobLossScaler": "fusion.optimizer",
    "job_optimizer": "fusion.fuse",
    "BucketBatchSampler": "bucketing",
    "padding_waste": "bucketing",
    "padding_suggestions": "padding",
}
__all__ = [
    "BucketBatchSampler",
    "FusedModel",
    "FusedOptimizer",
    "JobLossScaler",
    "LossScaling",
    "autocast",
    "checkpoint",
    "checkpoint_model",
    "compiled",
    "fuse",
    "gist",
    "gist_model",
    "job_optimizer",
    "padding_suggestions",
    "padding_waste",
    "scan_backward",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lightspeed.optimize' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"lightspeed.optimize.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)


if TYPE_CHECKING:
    from lightspeed.optimize.bucketing import BucketBatchSampler, padding_waste
    from lightspeed.optimize.checkpointing import checkpoint, checkpoint_model
    from lightspeed.optimize.compile import compiled
    from lightspeed.optimize.encodings import gist, gist_model
    from lightspeed.optimize.fusion.fuse import FusedModel, fuse, job_optimizer
    from lightspeed.optimize.fusion.optimizer import FusedOptimizer, JobLossScaler
    from lightspeed.optimize.padding import padding_suggestions
    from lightspeed.optimize.precision import LossScaling, autocast
