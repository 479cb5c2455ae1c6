"""Where a 2-process DDP step's time goes on a CPU: wall time against the CPU time of
each process's main thread and of its other threads (gloo's), per step.

    PYTHONPATH=src .venv/bin/python -m torch.distributed.run --standalone \
        --nproc-per-node 2 benchmarks/ddp_cpu_time.py --rounds 2

Every rank builds the same workloads at the batch sizes of
`benchmarks/predict_data_parallel.py` and, in each round, runs three loops of steps, all
ranks at once: the plain step (no communication), the step under
DistributedDataParallel, and the DDP step under `no_sync` (DDP's hooks, no all-reduce).
Each loop reads the wall clock and `getrusage` (the process, and the main thread alone)
before and after; rank 0 prints its figures per step, the median over rounds. The CPU
time of threads other than the main one is what gloo's threads burn; when the processes'
threads outnumber the cores, they share them with the step.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.suite import get
from predict_data_parallel import WORKLOADS  # the same workloads, at the same batch sizes

LOOPS = ("plain", "ddp", "no_sync")


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of the calling thread."""
    process = resource.getrusage(resource.RUSAGE_SELF)
    thread = resource.getrusage(resource.RUSAGE_THREAD)
    return process.ru_utime + process.ru_stime, thread.ru_utime + thread.ru_stime


def per_step(step: Callable[[], None], steps: int) -> tuple[float, float, float]:
    """(wall, process CPU, main-thread CPU) seconds per step over `steps` steps, every
    rank starting together after a few untimed steps."""
    for _ in range(3):
        step()
    dist.barrier()
    process0, thread0 = cpu_seconds()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    wall = time.perf_counter() - start
    process1, thread1 = cpu_seconds()
    return wall / steps, (process1 - process0) / steps, (thread1 - thread0) / steps


def loops(name: str, batch: int) -> dict[str, Callable[[], None]]:
    workload = get(name).with_batch_size(batch)
    plain = prepare(workload, StepSettings())
    ddp: PreparedStep = prepare(workload, StepSettings())
    model = DistributedDataParallel(ddp.model)
    ddp.model = model

    def no_sync() -> None:
        with model.no_sync():
            ddp.step()

    return {"plain": plain.step, "ddp": ddp.step, "no_sync": no_sync}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0, help="of steps per loop")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    runs = {name: loops(name, batch) for name, batch in WORKLOADS.items()}
    found: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):
        for name, steps in runs.items():
            for loop in LOOPS:
                wall = per_step(steps[loop], 2)[0]
                count = torch.tensor([max(3, int(args.seconds / wall))])
                dist.broadcast(count, 0)  # every rank runs as many steps
                found.setdefault((name, loop), []).append(per_step(steps[loop], int(count)))
    if rank == 0:
        print(
            f"{dist.get_world_size()} processes, 1 thread each, {os.cpu_count()} CPUs;"
            " ms per step, median over rounds: wall / main thread CPU / other threads' CPU"
        )
        print(f"{'workload':26s}" + "".join(f"{loop:>26s}" for loop in LOOPS))
        for name in runs:
            row = f"{name:26s}"
            for loop in LOOPS:
                figures = found[(name, loop)]
                wall = statistics.median(f[0] for f in figures)
                main_thread = statistics.median(f[2] for f in figures)
                others = statistics.median(f[1] - f[2] for f in figures)
                row += f"{wall * 1e3:10.2f} /{main_thread * 1e3:6.2f} /{others * 1e3:6.2f}"
            print(row)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
