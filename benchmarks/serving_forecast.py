"""How well `lightspeed serve-profile --predict-hardware/--predict-dtype` predicts ℓ(b),
the latency by batch size a serving plan is made from, on hardware and in a precision
it was not measured on.

    PYTHONPATH=src .venv/bin/python benchmarks/serving_forecast.py --rounds 3

A CPU-only machine has two changes to check against: the thread count (this CPU
calibrated at 1 and at 2 threads is two rooflines, as in `predict_hardware.py`) and
bf16 autocast (on a CPU with AMX, bf16 products run several times faster than fp32).
In each round, model by model: ℓ(b) is measured at 1 thread in fp32, then predicted
from it (`forecast_latency`, what the CLI runs) at 2 threads and in bf16, then measured
at 2 threads and in bf16 at 1 thread. Each figure is predicted / measured − 1 of a
batch size's median and p99 in one round; the table gives the median over rounds.
Two naive baselines: the identity (ℓ(b) does not change) and the peak ratio (ℓ(b)
scales with the fp32 peak between thread counts, or with the bf16 peak over fp32's).

No constant is fitted to these runs: the rules are `predict/hardware.py`'s and
`predict/carry.py`'s, committed before this ran. `wide` and the `hf:` models are
outside the suite.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from lightspeed.dtypes import Precision, StepDtype
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.serving import LatencyProfile
from lightspeed.hardware.resolve import resolve_hardware
from lightspeed.measure.step import StepSettings
from lightspeed.workflows.latency import forecast_latency, latency_by_batch
from lightspeed.workload import Workload
from lightspeed.workload.targets import load_target

sys.path.insert(0, str(Path(__file__).parent))
from serving_models import wide

SIZES = (1, 4, 16)
MODELS = {
    "resnet18-tiny": "resnet18-tiny",
    "bert-base-tiny": "bert-base-tiny",
    "wide-mlp": None,
    "hf:gpt2 (4 × 256)": "hf:gpt2?n_layer=4&n_embd=256&n_head=4&vocab_size=8000&seq_len=64",
    "hf:t5 (2+2 × 256)": "hf:t5?num_layers=2&num_decoder_layers=2&d_model=256&d_ff=1024"
    "&num_heads=4&d_kv=64&vocab_size=8000&seq_len=64",
}


def workload(name: str) -> Workload:
    target = MODELS[name]
    return wide if target is None else load_target(target)


def calibrated(threads: int) -> Hardware:
    torch.set_num_threads(threads)
    return resolve_hardware("local", Device.CPU)


def measured(
    wl: Workload, hw: Hardware, threads: int, dtype: StepDtype, budget_s: float
) -> LatencyProfile:
    torch.set_num_threads(threads)
    return latency_by_batch(wl, SIZES, hardware=hw, dtype=dtype, budget_s=budget_s)


def errors(predicted: LatencyProfile, actual: LatencyProfile) -> dict[str, list[float]]:
    """predicted / measured − 1 of each batch size's median and p99."""
    return {
        "median": [
            p.median_s / a.median_s - 1
            for p, a in zip(predicted.batches, actual.batches, strict=True)
        ],
        "p99": [
            p.p99_s / a.p99_s - 1 for p, a in zip(predicted.batches, actual.batches, strict=True)
        ],
    }


def scaled(profile: LatencyProfile, factor: float) -> dict[str, list[float]]:
    return {
        "median": [b.median_s * factor for b in profile.batches],
        "p99": [b.p99_s * factor for b in profile.batches],
    }


def one_round(name: str, one: Hardware, two: Hardware, budget_s: float) -> dict[str, Any]:
    wl = workload(name)
    fp32 = StepSettings(device=Device.CPU, dtype=StepDtype.FP32)
    base = measured(wl, one, 1, StepDtype.FP32, budget_s)
    to_two = forecast_latency(wl, base, hardware=one, settings=fp32, target=two)
    to_bf16 = forecast_latency(wl, base, hardware=one, settings=fp32, autocast="bf16")
    at_two = measured(wl, two, 2, StepDtype.FP32, budget_s)
    in_bf16 = measured(wl, one, 1, StepDtype.BF16, budget_s)
    torch.set_num_threads(1)
    peak_two = two.peak(Precision.FP32) / one.peak(Precision.FP32)
    peak_bf16 = one.peak(Precision.BF16) / one.peak(Precision.FP32)
    out: dict[str, Any] = {}
    for change, forecast, actual, peak in (
        ("2 threads", to_two, at_two, peak_two),
        ("bf16", to_bf16, in_bf16, peak_bf16),
    ):
        out[change] = {
            "lightspeed": errors(forecast.latency, actual),
            "identity": errors(base, actual),
            "peak ratio": {
                q: [
                    v / getattr(a, f"{q}_s") - 1
                    for v, a in zip(values, actual.batches, strict=True)
                ]
                for q, values in scaled(base, 1 / peak).items()
            },
            "measured_ms": [b.median_s * 1e3 for b in actual.batches],
            "predicted_ms": [b.median_s * 1e3 for b in forecast.latency.batches],
            "base_ms": [b.median_s * 1e3 for b in base.batches],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.4, help="seconds timing each batch size")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    names = args.models.split(",")
    two = calibrated(2)
    one = calibrated(1)
    rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names:
            rounds[name].append(one_round(name, one, two, args.budget))
            print(f"round {r + 1}: {name} done", file=sys.stderr, flush=True)
    machine = platform.processor() or platform.machine()
    print(f"{machine}, torch {torch.__version__}, {args.rounds} rounds")
    summary: dict[str, dict[str, dict[str, list[float]]]] = {}
    for change in ("2 threads", "bf16"):
        print(f"\n{change}: predicted / measured − 1, median over rounds (median; p99)")
        print("| model | batch | measured | predicted | lightspeed | identity | peak ratio |")
        print("|---|---|---|---|---|---|---|")
        for name in names:
            runs = [r[change] for r in rounds[name]]
            for i, size in enumerate(SIZES):

                def med(way: str, q: str, i: int = i, runs: list[Any] = runs) -> float:
                    return statistics.median(run[way][q][i] for run in runs)

                m = statistics.median(run["measured_ms"][i] for run in runs)
                p = statistics.median(run["predicted_ms"][i] for run in runs)
                cells = [
                    f"{med(way, 'median'):+.1%}; {med(way, 'p99'):+.1%}"
                    for way in ("lightspeed", "identity", "peak ratio")
                ]
                print(f"| {name} | {size} | {m:.2f} ms | {p:.2f} ms | " + " | ".join(cells) + " |")
                for way in ("lightspeed", "identity", "peak ratio"):
                    for q in ("median", "p99"):
                        summary.setdefault(change, {}).setdefault(way, {}).setdefault(q, []).append(
                            med(way, q)
                        )
        head = "median \\|error\\| of the median | worst | of the p99 | worst | cases"
        print(f"\n| {change} | {head} |")
        print("|---|---|---|---|---|---|")
        for way, qs in summary[change].items():
            a = [abs(e) for e in qs["median"]]
            b = [abs(e) for e in qs["p99"]]
            print(
                f"| {way} | {statistics.median(a):.1%} | {max(a):.1%} | {statistics.median(b):.1%}"
                f" | {max(b):.1%} | {len(a)} |"
            )
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
