"""`lightspeed predict TARGET --fuse K` against measurement: the fused step predicted
from one job's profile, and measured.

    PYTHONPATH=src .venv/bin/python benchmarks/predict_fusion.py --rounds 5

For each workload and K, in each round: one job's profile (`lightspeed.workflows.profile.profile`)
and the fused step predicted from it (`predict.fusion.on_fused`), then the single step
and the fused step (`lightspeed.fuse`) timed, in an order that alternates between
rounds. The error is on the speed-up (K single steps over one fused step), which is the
fused step's error with the single step fixed; each round's prediction is set against
that round's measurement, so both see the same minute of this shared machine, and the
median over rounds is reported (the predicted and measured columns: their medians).
Two naive predictions are scored beside it: fusion gains nothing (speed-up 1) and fusion
is free (speed-up K, the step as long as one job's).

mlp-tiny at K = 8 is the case the model's one constant (the least-work quarter) was
chosen on; the others are not. Every suite workload here trains with AdamW; `wide-mlp`
(fusion_throughput.py) is compute-bound.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from lightspeed.facts.profile import FusionPrediction
from lightspeed.measure.device import cpu_model_name
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.optimize.fusion.fuse import fuse
from lightspeed.predict.fusion import on_fused
from lightspeed.workflows.profile import profile
from lightspeed.workload import Workload

CASES = (
    ("mlp-tiny", 8),
    ("mlp-tiny", 4),
    ("mlp-tiny", 16),
    ("mlp", 4),
    ("gpt2-tiny", 4),
    ("resnet18-tiny", 4),
    ("bert-base-tiny", 4),
    ("wide-mlp", 4),
)


def _seconds_per_step(step: object, budget_s: float) -> float:
    """Median seconds of one step over bursts filling about `budget_s`."""
    run = step.step  # type: ignore[attr-defined]
    run()
    start = time.perf_counter()
    run()
    once = time.perf_counter() - start
    n = max(1, min(50, int(budget_s / max(once, 1e-6))))
    start = time.perf_counter()
    for _ in range(n):
        run()
    return (time.perf_counter() - start) / n


def main() -> None:
    from fusion_throughput import workload_named

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds a burst")
    parser.add_argument("--only", default=None, help="one workload name")
    args = parser.parse_args()
    print(f"{cpu_model_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    header = f"{'workload':16} {'K':>3} {'single':>9} {'fused pred':>10} {'fused meas':>10}"
    print(header + f" {'speed-up pred':>13} {'meas':>6} {'error':>7} {'rounds':>15}  verdict")
    errors: dict[str, list[float]] = {
        "model": [],
        "no gain": [],
        "free": [],
    }
    for name, k in CASES:
        if args.only and name != args.only:
            continue
        workload: Workload = workload_named(name)
        single = prepare(workload, StepSettings())
        fused = prepare(fuse(workload, k), StepSettings())
        singles: list[float] = []
        fuseds: list[float] = []
        verdicts: list[FusionPrediction] = []
        for r in range(args.rounds):
            # Each round profiles the step afresh and predicts from it, beside the steps
            # it times: the prediction and the measurement see the same minute.
            predicted = on_fused(profile(workload), k).prediction
            assert predicted is not None and predicted.fusion is not None
            verdicts.append(predicted.fusion)
            kinds = [(singles, single), (fuseds, fused)]
            for found, step in kinds if r % 2 == 0 else reversed(kinds):
                found.append(_seconds_per_step(step, args.budget))
        ratios = [(v.speedup, k * s / f) for v, s, f in zip(verdicts, singles, fuseds, strict=True)]
        speedup = statistics.median(r[1] for r in ratios)
        each = [p / m - 1 for p, m in ratios]
        error = statistics.median(each)
        verdict = sorted(verdicts, key=lambda v: v.speedup)[len(verdicts) // 2]
        errors["model"].append(abs(error))
        errors["no gain"].append(abs(1 / speedup - 1))
        errors["free"].append(abs(k / speedup - 1))
        print(
            f"{name:16} {k:>3} {statistics.median(singles) * 1e3:>7.3f}ms"
            f" {verdict.fused_step_s * 1e3:>8.3f}ms {statistics.median(fuseds) * 1e3:>8.3f}ms"
            f" {verdict.speedup:>12.2f}× {speedup:>5.2f}× {error:>+7.1%}"
            f" {min(each):>+7.1%}…{max(each):>+6.1%}"
            f"  {'helps' if verdict.helps else 'will not help'}"
        )
        del single, fused
    for name, found in errors.items():
        if found:
            print(
                f"median |error| of the speed-up, {name:14}: {statistics.median(found):6.1%}"
                f" (worst {max(found):.1%})"
            )


if __name__ == "__main__":
    main()
