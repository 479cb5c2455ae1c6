"""What a user points lightspeed at: a training step to study.

- `workload`: the `Workload` (model, batch, loss, optimizer; optionally a whole step, a
  data loader) and the callables it is built from.
- `targets`: a name from the command line (a suite name, `file.py:NAME`, `hf:MODEL_TYPE`)
  → a `Workload`.
- `hf`: `hf:MODEL_TYPE` targets, small configurations of `transformers` models built in
  code (the `[hf]` extra).

The package names `Workload` and its parts, so `from lightspeed.workload import
Workload` reads as what it is.
"""

from lightspeed.workload.workload import (
    BatchFactory,
    ForwardFn,
    LoaderFactory,
    LossFn,
    ModelFactory,
    OptimizerFactory,
    OptimizersFactory,
    PhaseHook,
    StepFn,
    Workload,
    default_optimizer,
)

__all__ = [
    "BatchFactory",
    "ForwardFn",
    "LoaderFactory",
    "LossFn",
    "ModelFactory",
    "OptimizerFactory",
    "OptimizersFactory",
    "PhaseHook",
    "StepFn",
    "Workload",
    "default_optimizer",
]
