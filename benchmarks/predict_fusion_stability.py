"""How much `lightspeed predict --fuse K` moves from one profile of a step to the next:
the same workload profiled again and again, and its fused speed-up predicted from each.

    PYTHONPATH=src .venv/bin/python benchmarks/predict_fusion_stability.py --profiles 6

Each line: the profile's step time, its ops' time and the time outside them, the fixed
cost of an op the model takes from it, and the predicted speed-up of K jobs fused.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from lightspeed.analysis.step_roofline import analyse_ops
from lightspeed.measure.device import cpu_model_name
from lightspeed.predict.fusion import fixed_op_cost_s, on_fused
from lightspeed.suite import get
from lightspeed.workflows.profile import profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="mlp-tiny")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--profiles", type=int, default=6)
    args = parser.parse_args()
    print(f"{cpu_model_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    workload = get(args.workload)
    speedups = []
    for _ in range(args.profiles):
        measured = profile(workload)
        predicted = on_fused(measured, args.k).prediction
        assert predicted is not None and predicted.fusion is not None
        ops = sum(op.time_s or 0.0 for op in measured.ops)
        speedups.append(predicted.fusion.speedup)
        print(
            f"step {(measured.step_time_s or 0) * 1e3:.3f} ms, ops {ops * 1e3:.3f} ms, outside"
            f" {(measured.unattributed_s or 0) * 1e3:.3f} ms, c"
            f" {fixed_op_cost_s(analyse_ops(measured)) * 1e6:.2f} µs: predicted"
            f" {predicted.fusion.speedup:.2f}×"
        )
    print(
        f"{args.workload} K={args.k}: predicted speed-up median {statistics.median(speedups):.2f}×"
        f" ({min(speedups):.2f}–{max(speedups):.2f})"
    )


if __name__ == "__main__":
    main()
