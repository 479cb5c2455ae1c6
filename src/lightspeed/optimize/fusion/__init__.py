"""Horizontal fusion (HFTA): K training jobs of one model run as one job.

- `fuse`: `fuse(workload, K)` and `FusedModel`, the K jobs' parameters stacked and run
  under vmap or through layer rewrites, with a folded loss.
- `layers`: the layer rewrites that run an `nn.Sequential` on the K jobs' stacked
  tensors, and `SeededDropout`.
- `optimizer`: `FusedOptimizer`, each job's update with its own hyper-parameters, and
  `JobLossScaler`, a loss scale per job for fp16.
- `torch_fused`: the one module that calls PyTorch's fused optimizer kernels.
"""
