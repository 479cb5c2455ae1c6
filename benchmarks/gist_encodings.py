"""What the Gist encodings save and cost on a VGG-style CNN: activation bytes kept for
backward (measured, and predicted on fake tensors) and step time, plain against encoded.

    PYTHONPATH=src .venv/bin/python benchmarks/gist_encodings.py --rounds 7

The model is the test's `VGGStyle` (tests/optimize/test_gist.py): three blocks of two 3×3
convolutions with ReLUs and a 2×2 max-pool, batch 8 of 32×32 images, 1 thread. Memory:
`measure_memory` on a real step of each, and `predict.encodings.gist_savings` on fake
tensors. Time: steps of the plain and the encoded model in interleaved rounds of 20, the
median ratio over rounds.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "optimize")]

from test_gist import stepped, vgg_workload  # noqa: E402

from conftest import FAKE_CPU  # noqa: E402
from lightspeed.measure.memory import measure_memory  # noqa: E402
from lightspeed.optimize.encodings import gist  # noqa: E402
from lightspeed.predict.encodings import gist_savings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    predicted = gist_savings(vgg_workload(), FAKE_CPU)
    variants = {
        "plain": vgg_workload(),
        "every candidate": gist(vgg_workload()),
        "helpful only": gist(vgg_workload(), predicted.helpful),
    }
    steps = {name: stepped(workload) for name, workload in variants.items()}
    kept = {name: measure_memory(p).activations_bytes for name, p in steps.items()}
    ratios: dict[str, list[float]] = {name: [] for name in variants if name != "plain"}
    for _ in range(args.rounds):
        seconds = {}
        for name, prepared in steps.items():
            start = time.perf_counter()
            for _ in range(20):
                prepared.step()
            seconds[name] = (time.perf_counter() - start) / 20
        for name in ratios:
            ratios[name].append(seconds[name] / seconds["plain"])
    print(f"{platform.processor() or platform.machine()}, 1 thread, {args.rounds} rounds")
    print(f"plain: {kept['plain']} B of activations, {seconds['plain'] * 1e3:.2f} ms a step")
    print(
        f"predicted: {predicted.saved_fraction:.1%} saved; helpful: {', '.join(predicted.helpful)}"
    )
    for name, found in ratios.items():
        saved = 1 - kept[name] / kept["plain"]
        print(f"{name}: {saved:.1%} saved, step time ×{statistics.median(found):.2f}")


if __name__ == "__main__":
    main()
