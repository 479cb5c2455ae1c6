"""`Workload → Workload` transforms that change how a step runs, not what it computes.

Each transform returns a new Workload whose name records the change and whose
docstring names its source, its preconditions and the equivalence it keeps:

- `precision.autocast`: the forward and loss under `torch.autocast` (mixed precision).
- `checkpoint.checkpoint`: activation checkpointing of chosen modules, planned by
  `checkpoint_plan.checkpoint_plan` (√N segments of the main stack of blocks by default).
- `gist.gist`: lossless encodings of the activations ReLU, ReLU6, LeakyReLU and
  max-pooling keep for backward (a bit an element; a byte a pooling window).

The submodules are imported by name (`from lightspeed.optimize.checkpoint import
checkpoint`): the package itself imports nothing, so that importing one transform does
not load the others.
"""
