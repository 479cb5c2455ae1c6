"""The worker torchrun starts in each process: `link` (a ping-pong between ranks 0 and
1), `corun` (fixed kernels timed alone and with every rank at once) or `step` (a
workload's training step under DistributedDataParallel).

Run as `python -m torch.distributed.run … -m lightspeed.measure.distributed.ddp_worker KIND …
--out PATH` (`measure/torchrun.run_workers`); rank 0 writes its result as JSON to PATH.
The process group is gloo on a CPU and NCCL on CUDA, one GPU per local rank.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from lightspeed.errors import LightspeedError, WorkloadError
from lightspeed.facts.device import Device
from lightspeed.measure.distributed.torchrun import error_path


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the worker's arguments, run it, and write rank 0's result or the error."""
    args = _parser().parse_args(argv)
    out = Path(args.out)
    rank = int(os.environ.get("RANK", "0"))
    try:
        device = _join(Device(args.device))
        torch.set_num_threads(args.threads)
        kinds = {"link": _link, "corun": _corun, "step": _step}
        result = kinds[args.kind](args, device)
        if rank == 0:
            # Whole or not at all: torchrun stops rank 0 as soon as another rank dies.
            partial = out.with_name(out.name + ".partial")
            partial.write_text(json.dumps(result))
            partial.replace(out)
        if dist.is_initialized():
            # No rank tears its process group down (where a gloo thread may abort it,
            # and torchrun then stops the others) before rank 0's result is written.
            dist.barrier()
    except LightspeedError as exc:
        error_path(out, rank).write_text(" ".join(str(exc).split()))
        raise SystemExit(1) from exc
    except Exception as exc:  # a collective or torch itself failed: say which, in one line
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        error_path(out, rank).write_text(
            f"rank {rank} of the processes under torchrun raised {type(exc).__name__}: {text}"
        )
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lightspeed.measure.distributed.ddp_worker")
    parser.add_argument("kind", choices=("link", "corun", "step"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    # link
    parser.add_argument("--sizes", type=int, nargs="*", default=())
    parser.add_argument("--min-s", type=float, default=0.02)
    # step
    parser.add_argument("--target")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--budget", type=float, default=2.0)
    parser.add_argument("--min-replicates", type=int, default=5)
    return parser


def _join(device: Device) -> torch.device:
    """Join the process group torchrun describes; the torch device of this rank."""
    if device is Device.CUDA:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        return torch.device("cuda", local)
    dist.init_process_group("gloo")
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _link(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Half the round-trip time of each message size between ranks 0 and 1, in seconds:
    the median of five blocks, each of enough round trips to last `min_s` (from a
    first, timed one, agreed between the two so both run the same count)."""
    rank = dist.get_rank()
    # Every rank makes the group, as torch requires, though only 0 and 1 use it.
    pair = dist.new_group([0, 1]) if dist.get_world_size() > 2 else None
    times: dict[int, float] = {}
    for size in args.sizes:
        buffer = torch.zeros(size, dtype=torch.uint8, device=device)
        if rank > 1:
            continue
        peer = 1 - rank

        def round_trip(buf: torch.Tensor = buffer, peer: int = peer) -> None:
            if rank == 0:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)

        round_trip()  # the first message on a pair of ranks also sets up the connection
        first = _timed(round_trip, 2, device)
        trips = max(2, min(2000, int(args.min_s / max(first, 1e-9))))
        count = torch.tensor([trips], device=device)
        dist.broadcast(count, 0, group=pair)
        trips = int(count.item())
        blocks = [_timed(round_trip, trips, device) for _ in range(5)]
        times[size] = statistics.median(blocks) / 2
    dist.barrier()
    return {"half_round_trip_s": {str(k): v for k, v in times.items()}, "backend": _backend()}


def _corun(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Rank 0's seconds per call of each fixed kernel (`corun_kernels`), first alone
    (the other ranks wait in a barrier) and then with every rank running them at once."""
    rank = dist.get_rank()
    kernels = corun_kernels(device)
    alone: dict[str, float] = {}
    if rank == 0:
        alone = {name: _kernel_time(fn, args.min_s, device) for name, fn in kernels.items()}
    dist.barrier()
    together = {}
    for name, fn in kernels.items():
        dist.barrier()  # every rank starts each kernel together
        together[name] = _kernel_time(fn, args.min_s, device)
    dist.barrier()
    return {"alone_s": alone, "together_s": together, "processes": dist.get_world_size()}


def corun_kernels(device: torch.device) -> dict[str, Callable[[], object]]:
    """The kernels a co-run measurement times, one per bound: a 512² fp32 matrix product
    (compute), a copy of 64 MiB (memory, past any cache), 100 additions of 4 elements
    (overhead: the per-op cost on the host)."""
    a = torch.ones(512, 512, device=device)
    source = torch.ones(2**24, device=device)
    target = torch.empty_like(source)
    tiny = torch.ones(4, device=device)

    def tiny_ops() -> None:
        for _ in range(100):
            torch.add(tiny, 1.0)

    return {
        "compute": lambda: torch.mm(a, a),
        "memory": lambda: target.copy_(source),
        "overhead": tiny_ops,
    }


def _kernel_time(fn: Callable[[], Any], min_s: float, device: torch.device) -> float:
    """The median of five blocks of `fn`, each of enough calls to last `min_s` seconds."""
    fn()
    first = _timed(fn, 1, device)
    calls = max(1, int(min_s / max(first, 1e-9)))
    return statistics.median(_timed(fn, calls, device) for _ in range(5))


def _timed(fn: Callable[[], Any], calls: int, device: torch.device) -> float:
    """Seconds per call of `calls` calls of `fn`."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / calls


def _backend() -> str:
    return str(dist.get_backend())


def _step(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Time the workload's step wrapped in DistributedDataParallel, with a clock every
    rank agrees on (`agreed_clock`), so every rank takes the timer's decisions alike."""
    from torch.nn.parallel import DistributedDataParallel

    from lightspeed.dtypes import StepDtype
    from lightspeed.measure.allocator import keep_freed_memory
    from lightspeed.measure.noise import NoiseProbe
    from lightspeed.measure.step import StepSettings, guard, prepare
    from lightspeed.measure.timer import TimerConfig, measure
    from lightspeed.workload.targets import load_target

    workload = load_target(args.target)
    if args.batch_size is not None:
        workload = workload.with_batch_size(args.batch_size)
    settings = StepSettings(device=Device(device.type), dtype=StepDtype.parse(args.dtype))
    prepared = prepare(workload, settings)
    with guard(workload, "wrapping the model in DistributedDataParallel"):
        prepared.model = DistributedDataParallel(
            prepared.model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=args.bucket_cap_mb,
        )
    config = TimerConfig(
        warmup_steps=args.warmup, budget_s=args.budget, min_replicates=args.min_replicates
    )
    kept = keep_freed_memory()
    rank = dist.get_rank()
    probe = NoiseProbe.start(settings.device) if rank == 0 else None
    clock = agreed_clock(device)
    with guard(workload, "the training step"):
        measurement = measure(prepared.step, sync=prepared.sync, config=config, clock=clock)
    noise = probe.finish() if probe is not None else None
    measurement = dataclasses.replace(measurement, noise=noise, freed_memory_kept=kept)
    if measurement.n < 1:
        raise WorkloadError(f"workload {workload.name!r}: no step was timed.")
    return {
        "measurement": dataclasses.asdict(measurement),
        "parameter_count": prepared.parameter_count,
        "backend": _backend(),
        "processes": dist.get_world_size(),
    }


def agreed_clock(device: torch.device) -> Callable[[], float]:
    """A clock whose every reading is the latest of all ranks' readings, in seconds since
    the ranks met: each reading is an all-reduce (MAX) of the ranks' own clocks, so it
    returns when the last rank reads it, and every rank gets the same value. A timer
    given it decides alike on every rank and times each block from the moment the last
    rank starts it to the moment the last rank ends it."""
    dist.barrier()
    base = time.perf_counter()
    reading = torch.zeros(1, dtype=torch.float64, device=device)

    def clock() -> float:
        reading.fill_(time.perf_counter() - base)
        dist.all_reduce(reading, op=dist.ReduceOp.MAX)
        return float(reading.item())

    return clock


if __name__ == "__main__":
    main()
