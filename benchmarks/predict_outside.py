"""Batch-size what-ifs on models outside the suite: predicted against measured.

    PYTHONPATH=src .venv/bin/python benchmarks/predict_outside.py --rounds 3
    PYTHONPATH=src .venv/bin/python benchmarks/predict_outside.py --models examined

Each round profiles every model at its batch size B, predicts 2B and 4B from that profile
with `lightspeed.predict` (what `lightspeed predict --batch-size` does where the profile
was measured), and profiles the model at 2B and 4B; the models take turns within a
round, so the machine's drift between minutes lands on all alike. An error is
predicted / measured − 1 within a round; each model's figure is the median over rounds.
The spread is how far the prediction itself moves between the rounds' profiles of the
same step: (largest − smallest) / median. Baselines: the identity (the step at B) and
linear scaling (∝ batch).

The models (`third_party.py`) are split in two: `examined`, the two on which the rule
was looked at and changed, and `validation`, run only with the rule frozen. Needs
`transformers` (the `hf` extra). One thread, so the other core keeps the machine's own
work off the measurement.
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

import lightspeed
import third_party

FACTORS = (2, 4)
SETS = {"examined": third_party.EXAMINED, "validation": third_party.VALIDATION}


def one_round(name: str, budget_s: float) -> dict[str, float]:
    """Predicted and baseline step times over measured, per factor, and the predicted
    step times (seconds) themselves, for one model in one round."""
    workload = third_party.outside_workload(name)
    measured = lightspeed.profile(workload, budget_s=budget_s)
    assert measured.step_time_s
    found: dict[str, float] = {}
    for factor in FACTORS:
        batch = workload.batch_size * factor
        predicted = lightspeed.predict(measured, workload=workload, batch_size=batch)
        actual = lightspeed.profile(workload.with_batch_size(batch), budget_s=budget_s)
        assert predicted.step_time_s and actual.step_time_s
        found[f"model ×{factor}"] = predicted.step_time_s / actual.step_time_s
        found[f"identity ×{factor}"] = measured.step_time_s / actual.step_time_s
        found[f"linear ×{factor}"] = measured.step_time_s * factor / actual.step_time_s
        found[f"predicted ×{factor} s"] = predicted.step_time_s
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing a profile")
    parser.add_argument("--models", choices=[*SETS, "all"], default="all")
    parser.add_argument("--only", nargs="*", help="these models only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.only or (
        [*third_party.EXAMINED, *third_party.VALIDATION]
        if args.models == "all"
        else SETS[args.models]
    )
    found: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names:
            found[name].append(one_round(name, args.budget))
            print(f"round {r + 1}: {name} done", flush=True)
    print(
        f"\nbatch ×2 and ×4 on {platform.processor() or platform.machine()}, 1 thread,"
        f" {args.rounds} rounds; error = predicted / measured − 1 (median over rounds)"
    )
    keys = [k for k in next(iter(found.values()))[0] if not k.endswith(" s")]
    print(f"{'model':16s}" + "".join(f"{k:>14s}" for k in keys) + "   spread ×2   spread ×4")
    errors: dict[str, list[float]] = {k: [] for k in keys}
    for name, rounds in found.items():
        row = f"{name:16s}"
        for k in keys:
            error = statistics.median(r[k] for r in rounds) - 1
            errors[k].append(abs(error))
            row += f"{error:>+13.1%} "
        for factor in FACTORS:
            steps = [r[f"predicted ×{factor} s"] for r in rounds]
            row += f"{(max(steps) - min(steps)) / statistics.median(steps):>11.1%} "
        print(row)
    model = [e for k, es in errors.items() if k.startswith("model") for e in es]
    print(
        f"\nmodel, ×2 and ×4 together: median |error| {statistics.median(model):.1%},"
        f" worst {max(model):.1%}"
    )
    print(
        "median |error|: "
        + ", ".join(
            f"{k} {statistics.median(e):.1%} (worst {max(e):.1%})" for k, e in errors.items()
        )
    )


if __name__ == "__main__":
    main()
