"""A fused sweep against the serial sweep of the same trials: wall time, the serial
estimate from a sample against the whole serial sweep measured, and the best trial.

    PYTHONPATH=src .venv/bin/python benchmarks/sweep_speed.py --rounds 3

Per round, in an order that alternates between rounds:
- fused: `lightspeed.workflows.sweep.sweep(workload, SPACE, trials=32, k=8, steps=N)`, which also
  runs its default sample of 4 trials alone and estimates the serial sweep from them
  (the sample's time is not in the fused wall time);
- serial: every trial the fused sweep ran, run alone one after another
  (`sweep.run_alone`: the workload's own model with PyTorch's optimizer), on the same
  batches, timed whole; and again with the optimizer on PyTorch's fused kernel
  (`fused=True`), the kernel the fused sweep's optimizer calls.
The speed-up is the serial wall time over the fused one, the median of each round's
ratio; the estimate's error is the sampled estimate over the measured serial time.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Sequence

import torch

from lightspeed.facts.sweep import Sweep, Trial
from lightspeed.measure.device import cpu_model_name
from lightspeed.suite import get
from lightspeed.workflows.sweep import run_alone, sweep
from lightspeed.workload import Workload

SPACE = "lr=loguniform(1e-4,1e-1) weight_decay=[0,0.01,0.1]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="mlp-tiny")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workload = get(args.workload)
    print(f"{cpu_model_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"{args.workload}: {args.trials} trials, K={args.k}, {args.steps} steps; {SPACE}")
    ratios, estimate_errors, same_best, matched = [], [], [], []
    for r in range(args.rounds):
        seed = r
        # The serial sweep runs the fused sweep's trials, so in odd rounds a first fused
        # sweep (untimed) gives them and the timed one runs after the serial sweep.
        found = _fused(workload, args, seed)
        if r % 2:
            serial_s, serial_best = _serial(workload, found.trials, args.steps, seed)
            kernel_s, _ = _serial(workload, found.trials, args.steps, seed, fused_kernel=True)
            found = _fused(workload, args, seed)
        else:
            kernel_s, _ = _serial(workload, found.trials, args.steps, seed, fused_kernel=True)
            serial_s, serial_best = _serial(workload, found.trials, args.steps, seed)
        matched.append(kernel_s / found.wall_s)
        estimate = found.serial_estimate_s or math.nan
        ratio = serial_s / found.wall_s
        error = estimate / serial_s - 1
        ratios.append(ratio)
        estimate_errors.append(error)
        same_best.append(found.best == serial_best)
        print(
            f"  round {r + 1} (seed {seed}): fused {found.wall_s:.2f} s, serial"
            f" {serial_s:.2f} s ({ratio:.2f}×), estimated serial {estimate:.2f} s"
            f" ({error:+.1%}); best: fused trial {found.best}, serial trial {serial_best};"
            f" serial with fused AdamW {kernel_s:.2f} s"
        )
    print(
        f"serial / fused: {statistics.median(ratios):.2f}×"
        f" (rounds {min(ratios):.2f}–{max(ratios):.2f})"
    )
    print(
        f"serial with fused AdamW / fused: {statistics.median(matched):.2f}×"
        f" (rounds {min(matched):.2f}–{max(matched):.2f})"
    )
    print(f"serial estimate from 4 trials: median error {statistics.median(estimate_errors):+.1%}")
    print(f"same best trial in {sum(same_best)} of {len(same_best)} rounds")


def _fused(workload: Workload, args: argparse.Namespace, seed: int) -> Sweep:
    return sweep(workload, SPACE, trials=args.trials, k=args.k, steps=args.steps, seed=seed)


def _serial(
    workload: Workload,
    trials: Sequence[Trial],
    steps: int,
    seed: int,
    fused_kernel: bool | None = None,
) -> tuple[float, int | None]:
    """Every trial alone, one after another: the wall time, and the best trial."""
    start = time.perf_counter()
    losses = {
        t.number: run_alone(
            workload, t.params, t.number, steps=steps, seed=seed, fused_kernel=fused_kernel
        )
        for t in trials
    }
    seconds = time.perf_counter() - start
    finished = {n: loss for n, loss in losses.items() if loss is not None}
    return seconds, min(finished, key=finished.__getitem__) if finished else None


if __name__ == "__main__":
    main()
