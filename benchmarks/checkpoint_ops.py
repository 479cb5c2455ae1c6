"""The checkpoint planner with op-level recomputation (Echo) against the planner with
whole blocks only: at each budget, the plan each picks, its peak, and its step time,
predicted and measured.

    PYTHONPATH=src .venv/bin/python benchmarks/checkpoint_ops.py --rounds 3

For each model (the suite's transformer encoder at batch 8 and GPT-2 small at batch 1):
the plain step is profiled; the planner weighs every option (`checkpoint_options`:
whole-block coverings and op-level ones, peaks on fake tensors, recompute times from
the profile and checkpoint's own work timed here). Budgets: each whole-block option's
own peak. At each, the whole-only choice (the least recompute among whole-block options
that fit) and the choice among all options. Then every distinct plan chosen, and the plain
step, are timed for real (`lightspeed.time_workload`), taking turns over `--rounds`
rounds; the figures are medians. `--device cuda` runs it on a GPU, where each plan's
peak is also measured (`torch.cuda.max_memory_allocated` over its timing, less what was
allocated before it was built).
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

import lightspeed
from lightspeed.facts.device import Device
from lightspeed.measure.step import StepSettings
from lightspeed.measure.timer import TimerConfig
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.predict.checkpointing import CheckpointOption, checkpoint_options
from lightspeed.suite import get

MODELS = {"transformer-encoder": 8, "gpt2-small": 1}
MB = 2**20


def is_op_level(option: CheckpointOption) -> bool:
    return any(m.startswith("ops") for m in option.modules)


def name(option: CheckpointOption) -> str:
    if not option.modules:
        return "plain"
    if len(option.modules) > 3:
        return f"{option.modules[0]} … {option.modules[-1]} ({len(option.modules)})"
    return ", ".join(option.modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds a timing takes")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    device = Device.parse(args.device)
    cuda = device is Device.CUDA
    settings = StepSettings(device=device)
    print(f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    if cuda:
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for model in args.models.split(","):
        workload = get(model).with_batch_size(MODELS[model])
        plain = lightspeed.profile(workload, device=device, budget_s=args.budget)
        assert plain.step_time_s is not None
        weighed = checkpoint_options(plain, workload).options
        print(f"\n### {model}, batch {workload.batch_size}: plain step {plain.step_time_s:.3f} s\n")
        print("| option | how | peak | kept | recompute (predicted) |")
        print("|---|---|---|---|---|")
        for o in weighed:
            how = "ops" if is_op_level(o) else ("whole" if o.modules else "—")
            print(
                f"| {name(o)} | {how} | {o.peak_bytes / MB:.1f} MiB |"
                f" {o.activations_bytes / MB:.0f} MiB | {o.recompute_s * 1e3:.0f} ms |"
            )
        whole = [o for o in weighed if not is_op_level(o)]
        chosen: dict[tuple[str, ...], CheckpointOption] = {(): weighed[0]}
        print(
            "\n| budget (a whole plan's peak) | whole only: plan | recompute |"
            " with op-level: plan | peak | recompute |"
        )
        print("|---|---|---|---|---|---|")
        for budget in sorted({o.peak_bytes for o in whole}):
            best_whole = min(
                (o for o in whole if o.peak_bytes <= budget), key=lambda o: o.recompute_s
            )
            best = min(
                (o for o in weighed if o.peak_bytes <= budget),
                key=lambda o: (o.recompute_s, o.peak_bytes),
            )
            chosen[best_whole.modules] = best_whole
            chosen[best.modules] = best
            print(
                f"| {budget / MB:.1f} MiB | {name(best_whole)} |"
                f" {best_whole.recompute_s * 1e3:.0f} ms | {name(best)} |"
                f" {best.peak_bytes / MB:.1f} MiB | {best.recompute_s * 1e3:.0f} ms |",
                flush=True,
            )
        steps: dict[tuple[str, ...], list[float]] = {k: [] for k in chosen}
        peaks: dict[tuple[str, ...], int] = {}
        for _ in range(args.rounds):
            for modules in chosen:
                changed = checkpoint(workload, list(modules)) if modules else workload
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                    before = torch.cuda.memory_allocated()
                timing = lightspeed.time_workload(
                    changed, settings, config=TimerConfig(budget_s=args.budget)
                )
                steps[modules].append(timing.measurement.median_s)
                if cuda:
                    peaks[modules] = torch.cuda.max_memory_allocated() - before
        base = statistics.median(steps[()])
        print(
            "\n| plan | peak predicted | peak measured | recompute predicted | step measured |"
            " measured − plain |"
        )
        print("|---|---|---|---|---|---|")
        for modules, option in chosen.items():
            s = statistics.median(steps[modules])
            measured = f"{peaks[modules] / MB:.1f} MiB" if modules in peaks else "—"
            print(
                f"| {name(option)} | {option.peak_bytes / MB:.1f} MiB | {measured} |"
                f" {option.recompute_s * 1e3:.1f} ms | {s * 1e3:.2f} ms |"
                f" {(s - base) * 1e3:+.2f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    main()
