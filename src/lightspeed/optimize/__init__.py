"""`Workload → Workload` transforms that change how a step runs, not what it computes.

Each transform returns a new Workload whose name records the change and whose
docstring names its source, its preconditions and the equivalence it keeps:

- `precision.autocast`: the forward and loss under `torch.autocast` (mixed precision).
- `checkpoint.checkpoint`: activation checkpointing of chosen modules, planned by
  `checkpoint_plan.checkpoint_plan` (√N segments of the main stack of blocks by default).
- `gist.gist`: lossless encodings of the activations ReLU, ReLU6, LeakyReLU and
  max-pooling keep for backward (a bit an element; a byte a pooling window).
- `compile.compiled`: the model under `torch.compile` (Inductor); equal within rounding.
- `bucketing.BucketBatchSampler`: batches of samples of similar length, for sequences
  padded to the longest in their batch (`padding_waste` says what padding costs).

And one advisor, which changes nothing itself: `padding.padding_suggestions`, the layer
sizes tensor cores (or AMX) cannot fully use in mixed precision, and what to pad them to.

The submodules are imported by name (`from lightspeed.optimize.checkpoint import
checkpoint`): the package itself imports nothing, so that importing one transform does
not load the others.
"""
