"""The data-loading tuner on a dataset that sleeps and one that burns CPU, and length
bucketing's padding on a long-tailed length distribution.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_data_loading.py --rounds 3

Loaders (benchmarks/loading_workloads.py): `loader_tuning.tune_loader` on SLEEPY and
BURNER, --rounds times each, alternating; per round the settings it measured, the wait
removed by the kept one, and observe()'s diagnosis before and after.

Bucketing: 20 000 lengths, log-normal around 90 tokens (σ 0.9 in log space, clipped to
8–2048), batch 32: padding waste (tokens computed / real tokens) of random batches, of
`BucketBatchSampler` by pool size, and of the whole dataset sorted; then the real tokens
a second of a 2-layer transformer encoder (d 128, 4 heads, 1 thread) trained on padded
batches of each, in interleaved rounds (median ratio).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import BatchSampler, RandomSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightspeed.measure.device import cpu_model_name
from lightspeed.optimize.bucketing import BucketBatchSampler, padding_waste
from lightspeed.workflows.loader_tuning import tune_loader
from loading_workloads import BURNER, SLEEPY


def loaders(rounds: int) -> None:
    for r in range(rounds):
        order = (SLEEPY, BURNER) if r % 2 == 0 else (BURNER, SLEEPY)
        for workload in order:
            found = tune_loader(workload, steps=30)
            print(f"\n{workload.name}, round {r + 1}:")
            for i, run in enumerate(found.runs):
                pred = f"{run.predicted_loop_s * 1e3:6.1f}" if run.predicted_loop_s else "     —"
                mark = "  kept" if i == found.chosen else ""
                print(
                    f"  {run.options.label:34} {run.threads} thr  wait {run.wait_s * 1e3:6.1f} ms"
                    f"  step {run.compute_s * 1e3:5.1f}  loop {run.loop_s * 1e3:6.1f}"
                    f"  pred {pred}  {run.samples_per_s:7.0f}/s{mark}"
                )
            removed = found.wait_removed
            print(
                f"  wait removed {removed:.1%}" if removed is not None else "  no wait",
                f"; loop {found.runs[0].loop_s / found.kept.loop_s:.2f}× faster;",
                f"bound {found.bound_before} {list(found.findings_before)}"
                f" → {found.bound_after} {list(found.findings_after)}",
            )
            if found.note:
                print(f"  note: {found.note}")


def long_tail(n: int) -> list[int]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.exp(torch.randn(n, generator=g) * 0.9 + 4.5).clamp(8, 2048)
    return [int(x) for x in lengths]


def bucketing(rounds: int) -> None:
    lengths = long_tail(20_000)
    random = list(BatchSampler(RandomSampler(range(len(lengths))), 32, drop_last=False))
    print(f"\nbucketing: {len(lengths)} lengths, mean {statistics.mean(lengths):.0f},")
    print(f"  median {statistics.median(lengths):.0f}, max {max(lengths)}; batch 32")
    print(f"  random batches: padding waste {padding_waste(lengths, random):.2f}")
    for pool in (10, 50, 100):
        waste = padding_waste(lengths, BucketBatchSampler(lengths, 32, pool=pool))
        print(f"  bucketed, pool {pool:3} batches: {waste:.3f}")
    whole = padding_waste(lengths, BucketBatchSampler(lengths, 32, pool=len(lengths)))
    print(f"  sorted whole: {whole:.3f}")
    # Training throughput on padded batches: real tokens a second.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    optimizer = torch.optim.AdamW(model.parameters())
    kinds = {
        "random": random[:40],
        "bucketed": list(BucketBatchSampler(lengths, 32, pool=50))[:40],
    }
    # Cap the longest batches so a round stays short: the same cap on both sides.
    ratio = []
    for _ in range(rounds):
        rates = {}
        for name, batches in kinds.items():
            real = 0
            start = time.perf_counter()
            for batch in batches:
                sizes = [min(lengths[i], 512) for i in batch]
                x = torch.randn(len(sizes), max(sizes), 128)
                pad = torch.arange(max(sizes))[None, :] >= torch.tensor(sizes)[:, None]
                optimizer.zero_grad()
                model(x, src_key_padding_mask=pad).square().mean().backward()
                optimizer.step()
                real += sum(sizes)
            rates[name] = real / (time.perf_counter() - start)
        ratio.append(rates["bucketed"] / rates["random"])
        print(f"  round: random {rates['random']:,.0f} tokens/s, bucketed {rates['bucketed']:,.0f}")
    print(f"  bucketed / random real tokens a second: median {statistics.median(ratio):.2f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("loaders", "bucketing"))
    args = parser.parse_args()
    print(f"{cpu_model_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    if args.only != "bucketing":
        loaders(args.rounds)
    if args.only != "loaders":
        bucketing(args.rounds)


if __name__ == "__main__":
    main()
