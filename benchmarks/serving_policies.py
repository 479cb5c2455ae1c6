"""Batching policies on a measured latency profile: the highest request rate each answers
with ≥ 99 % of requests within the SLO, and its goodput at a light and at twice the
largest batch's capacity — simulated (`lightspeed.predict.batching.serve`), from ℓ(b)
measured here.

    PYTHONPATH=src .venv/bin/python benchmarks/serving_policies.py --model resnet18-tiny --slo-ms 50

ℓ(b) is `lightspeed serve-profile`'s p99 at each batch size (one thread), interpolated
between them (`predict.serving.latency_at`). Policies: batch-1 serving; the fixed batch +
timeout (LitServe's `max_batch_size`, `batch_timeout`): every pair of 4, 16, 64 and 2, 5,
20 ms, the best for each rate kept (an oracle no fixed server has); the SLO-aware
policy, whose only setting is the SLO. The highest rate is found by bisection to 1 %, on
the same seeded Poisson arrivals for every policy.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable

import torch

from lightspeed.facts.device import Device
from lightspeed.hardware.resolve import resolve_hardware
from lightspeed.predict.batching import Served, fixed, poisson_arrivals, serve, slo_aware
from lightspeed.predict.serving import latency_at
from lightspeed.suite import get
from lightspeed.workflows.latency import latency_by_batch

BATCHES = (1, 2, 4, 8, 16, 32, 64)
TIMEOUTS_S = (0.002, 0.005, 0.02)
FIXED_BATCHES = (4, 16, 64)


def highest_rate(ok: Callable[[float], bool], low: float, high: float) -> float:
    """The highest rate in [low, high] for which `ok` holds, by bisection to 1 %."""
    while high > low * 1.01:
        mid = (low + high) / 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18-tiny")
    parser.add_argument("--slo-ms", type=float, default=50.0)
    parser.add_argument("--duration", type=float, default=5.0, help="simulated seconds")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds timing each batch")
    args = parser.parse_args()
    torch.set_num_threads(1)
    slo = args.slo_ms / 1e3
    profile = latency_by_batch(
        get(args.model), BATCHES, hardware=resolve_hardware(None, Device.CPU), budget_s=args.budget
    )
    print(f"{args.model} on {platform.processor() or platform.machine()}, 1 thread")
    for b in profile.batches:
        median, p99 = b.median_s * 1e3, b.p99_s * 1e3
        print(f"  batch {b.batch_size:3d}: median {median:7.2f} ms, p99 {p99:7.2f} ms")

    def latency(n: int) -> float:
        return latency_at(profile, n)

    top = max(b for b in BATCHES if 2 * latency(b) <= slo)
    policies: dict[str, Callable[[list[float]], Served]] = {
        "batch 1": lambda a: serve(a, lambda t, q: fixed(t, q, 1, 0.0), latency, slo),
        "SLO-aware": lambda a: serve(
            a, lambda t, q: slo_aware(t, q, latency, slo, top), latency, slo
        ),
        "best fixed": lambda a: max(
            (
                serve(a, lambda t, q, b=b, w=w: fixed(t, q, b, w), latency, slo)
                for b in FIXED_BATCHES
                for w in TIMEOUTS_S
            ),
            key=lambda s: s.within_slo,
        ),
    }
    capacity = top / latency(top)
    print(f"SLO {args.slo_ms:g} ms: largest batch with 2·ℓ(b) ≤ SLO {top}, {capacity:,.0f} req/s")
    for name, run in policies.items():

        def ok(rate: float, run: Callable[[list[float]], Served] = run) -> bool:
            return run(poisson_arrivals(rate, args.duration, seed=1)).fraction_within >= 0.99

        best = highest_rate(ok, 1.0, 2 * capacity)
        light = run(poisson_arrivals(0.2 * capacity, args.duration, seed=2))
        heavy = run(poisson_arrivals(2 * capacity, args.duration, seed=3))
        print(
            f"  {name:10s}: highest rate with ≥ 99 % within the SLO {best:8,.0f} req/s;"
            f" goodput at {0.2 * capacity:,.0f} req/s {light.goodput_per_s:8,.0f},"
            f" at {2 * capacity:,.0f} req/s {heavy.goodput_per_s:8,.0f}"
        )


if __name__ == "__main__":
    main()
