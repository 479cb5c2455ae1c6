"""How steady `lightspeed serve`'s plan is: ℓ(b) timed at start as the server times it,
several times over, and the batch limit b* and planned rate each timing gives.

    PYTHONPATH=src .venv/bin/python benchmarks/serving_plans.py --slo-ms 100 --times 6

Where ℓ(b) is flat, b* (the largest batch with 2·ℓ(b) within the SLO less its margin)
moves a lot with a few milliseconds of noise in the p99 timed at start; where ℓ(b)
rises, little. Every timing runs on one thread, as the server's model does.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from lightspeed.serving.serve import ServeSettings, prepare

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=f"{ROOT / 'benchmarks' / 'serving_models.py'}:wide")
    parser.add_argument("--slo-ms", type=float, action="append", required=True)
    parser.add_argument("--times", type=int, default=6)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds a batch size")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rates: dict[float, list[float]] = {slo: [] for slo in args.slo_ms}
    for _ in range(args.times):
        for slo in args.slo_ms:  # interleaved, so drift falls on each SLO alike
            prepared = prepare(args.model, ServeSettings(slo_s=slo / 1e3, budget_s=args.budget))
            rate = prepared.predicted_rate_per_s or 0.0
            rates[slo].append(rate)
            timed = " ".join(
                f"{b.batch_size}:{b.median_s * 1e3:.0f}/{b.p99_s * 1e3:.0f}"
                for b in prepared.profile.batches
            )
            print(
                f"SLO {slo:g} ms: b* = {prepared.max_batch}, planned {rate:.0f} req/s;"
                f" ℓ(b) median/p99 ms {timed}",
                flush=True,
            )
    for slo, values in rates.items():
        spread = (max(values) - min(values)) / statistics.median(values)
        print(
            f"SLO {slo:g} ms: planned rate {min(values):.0f}–{max(values):.0f} req/s,"
            f" median {statistics.median(values):.0f}, spread {100 * spread:.0f} % of it"
        )


if __name__ == "__main__":
    main()
