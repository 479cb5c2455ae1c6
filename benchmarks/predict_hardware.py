"""How well `lightspeed.predict(profile, hardware=…)` predicts a step on other hardware,
with the thread count as the hardware that changes (the only second device a CPU-only
machine has): this CPU calibrated at 1 and at 2 threads is two rooflines.

    PYTHONPATH=src .venv/bin/python benchmarks/predict_hardware.py --rounds 3

Each workload is profiled at 1 and at 2 threads, alternately, in `--rounds` rounds (on
a shared machine speed drifts by minutes: interleaving lands it on both alike); the
profile of the round whose step time is the median is kept. Then the 1-thread profile
predicts the 2-thread step and the reverse, and each prediction's error against the
measured step is set beside two naive baselines the model must beat: the identity (the
step does not change) and linear scaling (the step scales with the fp32 peak, as
FLOP-counting estimates do). The model has no constants fitted to these runs: its rules
are `predict/hardware.py`'s, its thresholds `rules.py`'s, fixed before this ran.
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

import lightspeed
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.hardware.resolve import resolve_hardware

# The suite's tiny workloads; every family but those whose step is mostly Python.
WORKLOADS = (
    "mlp-tiny",
    "resnet18-tiny",
    "resnet50-tiny",
    "mobilenetv3-large-tiny",
    "inception-v3-tiny",
    "transformer-encoder-tiny",
    "bert-base-tiny",
    "gpt2-tiny",
    "transformer-base-tiny",
    "lstm-seq2seq-tiny",
    "ncf-tiny",
    "pointnet-tiny",
    "dcgan-tiny",
    "deepspeech2-tiny",
)


def calibrated(threads: int) -> Hardware:
    torch.set_num_threads(threads)
    return resolve_hardware("local", Device.CPU)


def measured(name: str, threads: int, hw: Hardware, budget_s: float) -> Profile:
    torch.set_num_threads(threads)
    return lightspeed.profile(name, hardware=hw, budget_s=budget_s)


def median_profile(profiles: list[Profile]) -> Profile:
    ordered = sorted(profiles, key=lambda p: p.step_time_s or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def error(predicted: float, actual: float) -> float:
    return predicted / actual - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    hw = {n: calibrated(n) for n in (1, 2)}
    peak = {n: hw[n].peak(Precision.FP32) for n in (1, 2)}
    print(f"CPU: {platform.processor() or platform.machine()}; torch {torch.__version__}")
    for n in (1, 2):
        print(
            f"{n} thread(s): fp32 {peak[n] / 1e9:.1f} GFLOP/s, memory"
            f" {hw[n].memory_bandwidth_bytes_per_s / 1e9:.1f} GB/s, cache"
            f" {(hw[n].cache_bandwidth_bytes_per_s or 0) / 1e9:.1f} GB/s"
        )
    print(
        "\n| workload | 1 thread | 2 threads | 1→2 predicted (error) | identity | linear"
        " | 2→1 predicted (error) | identity | linear |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    errors: dict[str, list[float]] = {"model": [], "identity": [], "linear": []}
    for name in args.workloads:
        runs: dict[int, list[Profile]] = {1: [], 2: []}
        for _ in range(args.rounds):
            for n in (1, 2):
                runs[n].append(measured(name, n, hw[n], args.budget))
        one, two = median_profile(runs[1]), median_profile(runs[2])
        cells = [name, f"{one.step_time_s * 1e3:.2f} ms", f"{two.step_time_s * 1e3:.2f} ms"]
        for src, dst, s, d in ((one, two, 1, 2), (two, one, 2, 1)):
            assert src.step_time_s and dst.step_time_s
            model = lightspeed.predict(src, hardware=hw[d]).step_time_s
            assert model is not None
            linear = src.step_time_s * peak[s] / peak[d]
            trio = {
                "model": error(model, dst.step_time_s),
                "identity": error(src.step_time_s, dst.step_time_s),
                "linear": error(linear, dst.step_time_s),
            }
            for key, value in trio.items():
                errors[key].append(abs(value))
            cells += [
                f"{model * 1e3:.2f} ms ({trio['model']:+.1%})",
                f"{trio['identity']:+.1%}",
                f"{trio['linear']:+.1%}",
            ]
        print("| " + " | ".join(cells) + " |", flush=True)
    print()
    for key, values in errors.items():
        print(
            f"{key}: median |error| {statistics.median(values):.1%}, worst {max(values):.1%}"
            f" over {len(values)} predictions"
        )


if __name__ == "__main__":
    main()
