"""The checkpoint planner against Chen et al.'s √N plan: predicted and measured peak
memory, activations kept and step time.

    PYTHONPATH=src .venv/bin/python benchmarks/checkpoint_planner.py --rounds 3

For each workload (the suite's deepest tiny models, at a batch where activations
matter): the plain step is profiled, and `predict.checkpointing.plan_checkpoint` plans
for three budgets — the √N plan's own peak (equal memory: the planner must not be
slower), halfway between the lowest peak any option reaches and the plain step's, and
half the plain step's activations kept for backward. Each plan,
√N and the plain step are then profiled as they are, taking turns in each round; the
figures are medians over rounds. 1 thread.
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

import lightspeed
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.predict.checkpointing import plan_checkpoint
from lightspeed.suite import get

WORKLOADS = {"resnet50-tiny": 64, "resnet18-tiny": 64, "gpt2-tiny": 16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing a profile")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{platform.processor() or platform.machine()}, 1 thread, {args.rounds} rounds")
    for name, batch in WORKLOADS.items():
        workload = get(name).with_batch_size(batch)
        plain = lightspeed.profile(workload, budget_s=args.budget)
        assert plain.memory is not None and plain.step_time_s is not None
        at_sqrt_n = plan_checkpoint(plain, workload, 2**62)
        assert at_sqrt_n.sqrt_n is not None
        equal = plan_checkpoint(plain, workload, at_sqrt_n.sqrt_n.peak_bytes)
        lowest = min(o.peak_bytes for o in equal.options)
        halfway = plan_checkpoint(plain, workload, (lowest + equal.plain.peak_bytes) // 2)
        half_kept = plan_checkpoint(
            plain, workload, equal.plain.activations_bytes // 2, "activations"
        )
        plans = {
            "plain": ((), equal.plain),
            "√N": (("auto",), equal.sqrt_n),
            "plan at √N's peak": (equal.chosen.modules, equal.chosen),
            "plan at halfway": (halfway.chosen.modules, halfway.chosen),
            "half the activations": (half_kept.chosen.modules, half_kept.chosen),
        }
        measured: dict[str, list[tuple[float, int, int]]] = {label: [] for label in plans}
        for _ in range(args.rounds):
            for label, (modules, _) in plans.items():
                if not modules:
                    changed = workload
                elif modules == ("auto",):
                    changed = checkpoint(workload, "auto")
                else:
                    changed = checkpoint(workload, list(modules))
                found = lightspeed.profile(changed, budget_s=args.budget)
                assert found.memory is not None and found.step_time_s is not None
                measured[label].append(
                    (found.step_time_s, found.memory.peak_bytes, found.memory.activations_bytes)
                )
        base = statistics.median(m[0] for m in measured["plain"])
        base_activations = statistics.median(m[2] for m in measured["plain"])
        print(f"\n{name}, batch {batch}: plain step {base * 1e3:.1f} ms")
        print(
            f"{'':20s}{'modules':>40s}{'peak pred/meas MiB':>22s}{'activations saved':>19s}"
            f"{'time added pred/meas':>24s}"
        )
        for label, (modules, option) in plans.items():
            step = statistics.median(m[0] for m in measured[label])
            peak = statistics.median(m[1] for m in measured[label])
            activations = statistics.median(m[2] for m in measured[label])
            spec = ",".join(modules) or "-"
            print(
                f"{label:20s}{spec[:40]:>40s}"
                f"{option.peak_bytes / 2**20:>11.2f}/{peak / 2**20:<10.2f}"
                f"{1 - activations / base_activations:>18.1%}"
                f"{option.recompute_s / base:>+12.1%}/{step / base - 1:<+11.1%}"
            )


if __name__ == "__main__":
    main()
