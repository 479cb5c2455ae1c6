"""Horizontal fusion's throughput: K jobs of one workload fused, against the K jobs run
one after another, and against 2 processes sharing the K jobs (the concurrency baseline
HFTA compared with).

    PYTHONPATH=src .venv/bin/python benchmarks/fusion_throughput.py --rounds 5
    PYTHONPATH=src .venv/bin/python benchmarks/fusion_throughput.py --workload wide-mlp --k 8

Per round, in an order that alternates between rounds:
- serial: the K jobs, each its own model and optimizer, `--steps` steps each, one job
  after another, on all the CPU's threads;
- serial, fused AdamW: the same with each job's AdamW on PyTorch's fused kernel
  (`fused=True`), which the fused jobs' optimizer calls: what fusion gains beyond the
  optimizer's kernel;
- 2 processes: K/2 jobs in each of 2 processes at once (1 thread each), each process
  running its jobs one after another; the wall time from both starting to both done;
- fused: `lightspeed.fuse(workload, K)`, `--steps` steps.
Throughput: samples a second over all jobs (K × batch × steps / wall time). The figures
are medians over rounds; the ratios are the medians of each round's ratio.

`wide-mlp` is an MLP of 4096-wide layers at batch 256: compute-bound, where fusion has
nothing to save.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import statistics
import time

import torch
from torch import nn

from lightspeed.measure.device import cpu_model_name
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.optimize.fusion.fuse import fuse, lone_optimizer, optimizer_hparams
from lightspeed.suite import get
from lightspeed.workload import Workload


def wide_mlp() -> Workload:
    def model() -> nn.Module:
        return nn.Sequential(
            nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)
        )

    return Workload(
        name="wide-mlp",
        model=model,
        batch=lambda n: (torch.randn(n, 1024), torch.randint(0, 10, (n,))),
        loss=lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
        batch_size=256,
    )


def workload_named(name: str) -> Workload:
    return wide_mlp() if name == "wide-mlp" else get(name)


def with_fused_kernels(workload: Workload) -> Workload:
    """`workload` with its optimizer, its hyper-parameters kept, on PyTorch's fused kernel
    (`fused=True`), the kernel the fused jobs' optimizer calls: the serial baseline
    without the optimizer's gain."""
    algorithm, hparams, nesterov = optimizer_hparams(workload)
    return dataclasses.replace(
        workload,
        optimizer=lambda params: lone_optimizer(
            algorithm, params, hparams, nesterov=nesterov, fused=True
        ),
    )


def run_jobs(name: str, jobs: int, steps: int, kernels: bool = False) -> float:
    """Seconds for `jobs` jobs of `steps` steps each, one after another (after one
    warm-up step each); `kernels`: their AdamW on the fused kernel."""
    workload = workload_named(name)
    if kernels:
        workload = with_fused_kernels(workload)
    prepared = [prepare(workload, StepSettings()) for _ in range(jobs)]
    for p in prepared:
        p.step()
    start = time.perf_counter()
    for p in prepared:
        for _ in range(steps):
            p.step()
    return time.perf_counter() - start


def _process(name: str, jobs: int, steps: int, ready: mp.Barrier, out: mp.Queue) -> None:
    torch.set_num_threads(1)
    workload = workload_named(name)
    prepared = [prepare(workload, StepSettings()) for _ in range(jobs)]
    for p in prepared:
        p.step()
    ready.wait()
    start = time.perf_counter()
    for p in prepared:
        for _ in range(steps):
            p.step()
    out.put((start, time.perf_counter()))


def two_processes(name: str, k: int, steps: int) -> float:
    """Wall seconds from the first of 2 processes starting its K/2 jobs to the last
    finishing."""
    ready, out = mp.Barrier(2), mp.Queue()
    procs = [mp.Process(target=_process, args=(name, k // 2, steps, ready, out)) for _ in range(2)]
    for p in procs:
        p.start()
    spans = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def fused(name: str, k: int, steps: int) -> float:
    prepared = prepare(fuse(workload_named(name), k), StepSettings())
    prepared.step()
    start = time.perf_counter()
    for _ in range(steps):
        prepared.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="mlp-tiny")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workload = workload_named(args.workload)
    samples = args.k * workload.batch_size * args.steps
    print(f"{cpu_model_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"{args.workload}, K={args.k}, batch {workload.batch_size}, {args.steps} steps a job")
    kinds = {
        "serial": lambda: run_jobs(args.workload, args.k, args.steps),
        "serial, fused AdamW": lambda: run_jobs(args.workload, args.k, args.steps, kernels=True),
        "2 processes": lambda: two_processes(args.workload, args.k, args.steps),
        "fused": lambda: fused(args.workload, args.k, args.steps),
    }
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    ratios: dict[str, list[float]] = {
        "fused / serial": [],
        "fused / serial, fused AdamW": [],
        "fused / 2 processes": [],
    }
    for r in range(args.rounds):
        order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
        seconds = {name: kinds[name]() for name in order}
        for name, s in seconds.items():
            rates[name].append(samples / s)
        for baseline in ("serial", "serial, fused AdamW", "2 processes"):
            ratios[f"fused / {baseline}"].append(seconds[baseline] / seconds["fused"])
        print(
            f"  round {r + 1}: "
            + ", ".join(f"{n} {samples / s:,.0f}/s" for n, s in seconds.items())
        )
    for name, found in rates.items():
        print(f"{name:20} {statistics.median(found):>12,.0f} samples/s")
    for name, found in ratios.items():
        print(
            f"{name:28} {statistics.median(found):.2f}× (rounds {min(found):.2f}–{max(found):.2f})"
        )


if __name__ == "__main__":
    main()
