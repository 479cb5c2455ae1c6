"""How well `predict.data_parallel.on_data_parallel` predicts a step in 2-way data
parallel (DistributedDataParallel over gloo on this CPU) from a 1-process profile.

    PYTHONPATH=src .venv/bin/python benchmarks/predict_data_parallel.py --rounds 3

In each of `--rounds` rounds, for every workload in turn: a profile of 1 process at 1
thread (`lightspeed.profile`), then the step measured in 2 processes of 1 thread each
under torchrun (what `lightspeed time NAME --nproc 2 --threads 1 --batch-size B` runs);
and once a round the link, measured apart by `lightspeed hw link`'s ping-pong (never
from the all-reduce itself). Interleaving lands a shared machine's drift on all alike.
For each workload, the round whose profile has the median step is kept, with the median
2-process step over rounds and the median link. The prediction's error is set beside
two naive baselines: the identity (the 1-process step) and communication not
overlapped (the step plus every bucket's all-reduce).

Two processes on one machine share its cores, caches and memory bandwidth, so each
computes slower than one alone. That is measured apart from every workload, once a round,
with fixed kernels — a matrix product, a copy past the caches, tiny ops — timed alone and
in 2 processes at once (`measure_corun`); each workload's slowdown weighs them by its ops'
bounds (`corun_slowdown`). Nothing is fitted on the workloads predicted. The model
without the slowdown (1.0, a device each) is shown beside.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

import lightspeed
from lightspeed.errors import LightspeedError
from lightspeed.facts.device import Device
from lightspeed.facts.link import CoRun, Link
from lightspeed.facts.profile import Profile
from lightspeed.hardware.resolve import resolve_hardware
from lightspeed.measure.distributed.ddp_timing import time_data_parallel
from lightspeed.measure.distributed.link_bench import measure_corun, measure_link
from lightspeed.measure.timer import TimerConfig
from lightspeed.predict.data_parallel import communication, corun_slowdown, on_data_parallel
from lightspeed.workflows.profile import run_setup

# Tiny suite workloads, at batch sizes that make a 1-thread step 10–50 ms here.
WORKLOADS = {
    "mlp-tiny": 1024,
    "gpt2-tiny": 4,
    "resnet18-tiny": 8,
    "transformer-encoder-tiny": 16,
    "bert-base-tiny": 8,
    "ncf-tiny": 2048,
}


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or platform.machine()
    for row in out.splitlines():
        if row.startswith("Model name:"):
            return row.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def busy_share(window_s: float = 1.0) -> float:
    """The share of this machine's CPU time that was busy over `window_s` seconds (this
    process idles meanwhile), from /proc/stat; 0 where it cannot be read."""

    def ticks() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    try:
        busy0, total0 = ticks()
        time.sleep(window_s)
        busy1, total1 = ticks()
    except OSError:
        return 0.0
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_quiet(max_wait_s: float, threshold: float = 0.15) -> bool:
    """Wait until the machine is quiet (under `threshold` of its CPU busy over a second)
    for at most `max_wait_s` seconds; whether it was."""
    deadline = time.monotonic() + max_wait_s
    while busy_share() > threshold:
        if time.monotonic() > deadline:
            return False
        time.sleep(2.0)
    return True


def median_link(links: list[Link]) -> Link:
    return Link(
        id=links[0].id,
        name=links[0].name,
        bandwidth_bytes_per_s=statistics.median(k.bandwidth_bytes_per_s for k in links),
        latency_s=statistics.median(k.latency_s for k in links),
        sources=links[0].sources,
    )


def median_profile(profiles: list[Profile]) -> Profile:
    ordered = sorted(profiles, key=lambda p: p.step_time_s or 0.0)
    return ordered[(len(ordered) - 1) // 2]


def median_corun(coruns: list[CoRun]) -> CoRun:
    return CoRun(
        processes=coruns[0].processes,
        compute=statistics.median(c.compute for c in coruns),
        memory=statistics.median(c.memory for c in coruns),
        overhead=statistics.median(c.overhead for c in coruns),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument(
        "--quiet-wait", type=float, default=120.0, help="Most seconds to wait for a quiet machine."
    )
    parser.add_argument("--log", help="write torchrun's output to this file")
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    if args.log:  # torchrun's own output, to see why a launch failed
        handler = logging.FileHandler(args.log)
        logging.getLogger("lightspeed.measure.distributed.torchrun").addHandler(handler)
        logging.getLogger("lightspeed.measure.distributed.torchrun").setLevel(logging.DEBUG)
    torch.set_num_threads(1)
    hw = resolve_hardware("local", Device.CPU)
    config = TimerConfig(budget_s=args.budget)
    profiles: dict[str, list[Profile]] = {w: [] for w in args.workloads}
    measured: dict[str, list[float]] = {w: [] for w in args.workloads}
    links: list[Link] = []
    coruns: list[CoRun] = []
    loud = 0
    for r in range(args.rounds):
        loud += not wait_quiet(args.quiet_wait)
        links.append(measure_link(2, threads=1).link)
        loud += not wait_quiet(args.quiet_wait)
        coruns.append(measure_corun(2, threads=1))
        for name in args.workloads:
            batch = WORKLOADS.get(name)
            torch.set_num_threads(1)
            loud += not wait_quiet(args.quiet_wait)
            profiles[name].append(
                lightspeed.profile(name, hardware=hw, batch_size=batch, budget_s=args.budget)
            )
            wl, settings, _ = run_setup(name, Device.CPU, "fp32", batch, hw)
            loud += not wait_quiet(args.quiet_wait)
            for attempt in range(3):  # a launch that failed is tried again
                try:
                    run = time_data_parallel(name, wl, settings, 2, config=config, threads=1)
                    break
                except LightspeedError as exc:
                    print(f"round {r + 1}: {name}: {exc}; again", flush=True)
                    if attempt == 2:
                        raise
            measured[name].append(run.timing.measurement.median_s)
            print(
                f"round {r + 1}: {name}: 1 process {profiles[name][-1].step_time_s * 1e3:.2f} ms,"
                f" 2 processes {measured[name][-1] * 1e3:.2f} ms",
                flush=True,
            )
    link = median_link(links)
    print(f"\nCPU: {cpu_name()}; torch {torch.__version__}; 1 thread a process")
    print(f"measurements begun on a busy machine (waited {args.quiet_wait:.0f} s): {loud}")
    print(
        f"link (median of {len(links)}): latency {link.latency_s * 1e6:.1f} µs, bandwidth"
        f" {link.bandwidth_bytes_per_s / 1e9:.2f} GB/s each way"
    )
    corun = median_corun(coruns)
    print(
        f"co-run slowdown of 2 processes (median of {len(coruns)}): compute"
        f" {corun.compute:.2f}×, memory {corun.memory:.2f}×, overhead {corun.overhead:.2f}×"
    )
    header = (
        f"{'workload':26} {'batch':>5} {'grads':>7} {'1 proc':>8} {'bwd':>7} {'measured':>9}"
        f" {'predicted':>9} {'error':>7} {'no slowdown':>11} {'identity':>8} {'no overlap':>10}"
    )
    print(header)
    errors: dict[str, list[float]] = {
        "model": [],
        "no slowdown": [],
        "identity": [],
        "no overlap": [],
    }
    for name in args.workloads:
        profile = median_profile(profiles[name])
        one = profile.step_time_s or 0.0
        actual = statistics.median(measured[name])
        slowdown = corun_slowdown(profile, corun)
        comm = communication(profile, 2, link, compute_slowdown=slowdown)
        predicted = on_data_parallel(profile, 2, link, compute_slowdown=slowdown).step_time_s
        plain = on_data_parallel(profile, 2, link).step_time_s or 0.0
        no_overlap = one * slowdown + comm.all_reduce_s
        row = {
            "model": (predicted or 0.0) / actual - 1,
            "no slowdown": plain / actual - 1,
            "identity": one / actual - 1,
            "no overlap": no_overlap / actual - 1,
        }
        for key, value in row.items():
            errors[key].append(abs(value))
        print(
            f"{name:26} {profile.workload.batch_size:5d}"
            f" {comm.gradient_bytes / 2**20:5.2f}Mi {one * 1e3:6.2f}ms"
            f" {comm.backward_s * 1e3:5.2f}ms {actual * 1e3:7.2f}ms"
            f" {(predicted or 0.0) * 1e3:7.2f}ms {100 * row['model']:+6.1f}% ({slowdown:.2f}×)"
            f" {100 * row['no slowdown']:+10.1f}% {100 * row['identity']:+7.1f}%"
            f" {100 * row['no overlap']:+9.1f}%"
        )
    print(
        "median |error|: "
        + ", ".join(f"{k} {100 * statistics.median(v):.1f}%" for k, v in errors.items())
    )


if __name__ == "__main__":
    main()
