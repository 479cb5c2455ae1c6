"""How well `lightspeed.predict` predicts the changes a step's shapes show — another batch
size, autocast bf16, activation checkpointing — against the change made and measured.

    PYTHONPATH=src .venv/bin/python benchmarks/predict_changes.py batch --rounds 3
    PYTHONPATH=src .venv/bin/python benchmarks/predict_changes.py bf16 --rounds 3
    PYTHONPATH=src .venv/bin/python benchmarks/predict_changes.py checkpoint --rounds 3

Each round profiles every workload as it is, predicts the change from that profile, and
profiles the change made with PyTorch itself (`with_batch_size`, `torch.autocast` via
`optimize.precision.autocast`, `torch.utils.checkpoint` via `optimize.checkpointing`); the
workloads take turns within a round, so the machine's drift between minutes lands on
all alike, and each figure is the median over rounds of predicted / measured. Two naive
baselines the model must beat: the identity (nothing changes) and, for the batch size,
linear scaling (time ∝ FLOPs, so ∝ batch). "model" is what `lightspeed predict` does on
the machine the profile was measured on (the kernels a change alters timed one by one);
"roofline only" what it does for a profile measured elsewhere (the roofline's rules).
One thread, so the other core keeps the machine's own work off the measurement. The
model's rules and its one threshold (`predict.carry`'s fit of the marginal cost: 3 ops,
a 2× spread of sizes) were fixed before these runs; no constant is fitted to them.
"""

from __future__ import annotations

import argparse
import platform
import statistics
from collections.abc import Callable

import torch

import lightspeed
from lightspeed.facts.profile import Profile
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.optimize.precision import autocast
from lightspeed.suite import get
from lightspeed.workload import Workload

# Every tiny workload whose step runs on fake tensors (deepspeech2's CTC loss does not).
BATCH_WORKLOADS = (
    "mlp-tiny",
    "resnet18-tiny",
    "resnet50-tiny",
    "mobilenetv3-large-tiny",
    "inception-v3-tiny",
    "transformer-encoder-tiny",
    "bert-base-tiny",
    "gpt2-tiny",
    "llama-tiny",
    "transformer-base-tiny",
    "lstm-seq2seq-tiny",
    "ncf-tiny",
    "pointnet-tiny",
    "dcgan-tiny",
)
# The suite's transformers.
TRANSFORMERS = (
    "transformer-encoder-tiny",
    "bert-base-tiny",
    "gpt2-tiny",
    "llama-tiny",
    "transformer-base-tiny",
)
BATCH_FACTOR = 4

# change → (workloads, the prediction's arguments, the change made for real)
CHANGES: dict[str, tuple[tuple[str, ...], dict[str, object], Callable[[Workload], Workload]]] = {
    "batch": (
        BATCH_WORKLOADS,
        {},
        lambda w: w.with_batch_size(w.batch_size * BATCH_FACTOR),
    ),
    "bf16": (TRANSFORMERS, {"dtype": "bf16"}, lambda w: autocast(w, "bf16")),
    "checkpoint": (TRANSFORMERS, {"checkpoint": "auto"}, lambda w: checkpoint(w, "auto")),
}


def one_round(change: str, name: str, budget_s: float) -> dict[str, float]:
    """Predicted / measured step time and peak memory, and the baselines', for one
    workload in one round."""
    _, arguments, made = CHANGES[change]
    workload = get(name)
    measured = lightspeed.profile(workload, budget_s=budget_s)
    kwargs = dict(arguments)
    if change == "batch":
        kwargs["batch_size"] = workload.batch_size * BATCH_FACTOR
    predicted = lightspeed.predict(measured, workload=workload, **kwargs)  # type: ignore[arg-type]
    roofline = lightspeed.predict(
        measured,
        workload=workload,
        time_kernels=False,
        **kwargs,  # type: ignore[arg-type]
    )
    actual = lightspeed.profile(made(workload), budget_s=budget_s)
    return ratios(measured, predicted, roofline, actual, change)


def ratios(
    measured: Profile, predicted: Profile, roofline: Profile, actual: Profile, change: str
) -> dict[str, float]:
    step = actual.step_time_s
    assert step and measured.step_time_s and predicted.step_time_s and roofline.step_time_s
    assert actual.memory and predicted.memory and measured.memory
    found = {
        "model": predicted.step_time_s / step,
        "roofline only": roofline.step_time_s / step,
        "identity": measured.step_time_s / step,
        "memory": predicted.memory.peak_bytes / actual.memory.peak_bytes,
        "memory identity": measured.memory.peak_bytes / actual.memory.peak_bytes,
    }
    if change == "batch":
        found["linear"] = measured.step_time_s * BATCH_FACTOR / step
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("change", choices=sorted(CHANGES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing a profile")
    parser.add_argument("--only", nargs="*", help="these workloads only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.only or CHANGES[args.change][0]
    found: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names:
            found[name].append(one_round(args.change, name, args.budget))
            print(f"round {r + 1}: {name} done", flush=True)
    print(
        f"\n{args.change} on {platform.processor() or platform.machine()}, 1 thread,"
        f" {args.rounds} rounds; error = predicted / measured − 1 (median over rounds)"
    )
    keys = list(next(iter(found.values()))[0])
    print(f"{'workload':26s}" + "".join(f"{k:>17s}" for k in keys))
    errors: dict[str, list[float]] = {k: [] for k in keys}
    for name, rounds in found.items():
        row = f"{name:26s}"
        for k in keys:
            error = statistics.median(r[k] for r in rounds) - 1
            errors[k].append(abs(error))
            row += f"{error:>+16.1%} "
        print(row)
    print(
        "\nmedian |error|: "
        + ", ".join(
            f"{k} {statistics.median(e):.1%} (worst {max(e):.1%})" for k, e in errors.items()
        )
    )


if __name__ == "__main__":
    main()
