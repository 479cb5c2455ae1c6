"""What a user runs: each workflow ties measure, analysis, predict and optimize together
and returns facts for `report/` to draw.

- `profile`: one training step measured, placed on the roofline (`lightspeed.profile`).
- `observe`: a user's own training loop traced with torch.profiler (`lightspeed.observe`).
- `bench`: the suite profiled and timed in interleaved rounds, for the results store.
- `tune`: apply each optimization, check it, measure it: predicted beside measured gain.
- `loader_tuning`: the data loader's options searched for the fastest fed step.
- `sweep`: an optimizer's hyper-parameters searched, K trials fused into one job.
"""
