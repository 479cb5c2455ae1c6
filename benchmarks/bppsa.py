"""An nn.RNN's backward as a parallel scan (BPPSA, `optimize.scan_backward`) against
autograd's, measured and predicted, on this CPU (or a GPU, `--device cuda`).

    PYTHONPATH=src .venv/bin/python benchmarks/bppsa.py --rounds 7

Part 1, the backward alone: a one-layer tanh `nn.RNN` (8 inputs, batch 4) for T in
{1k, 4k, 16k} time steps and H in {8, 16, 32} hidden units, fp32, a loss at every step.
The two backwards take turns in each round; each figure is the median over rounds of
the backward's wall time (the forward and the loss are outside it). Beside each, the
gradients' norm-wise difference from autograd's, and `predict.scan.predict_scan` on the
calibrated local CPU, every kernel at the larger of its speed of light and the cost of
one small op on this CPU (measured here, before, by timing a tiny product: nothing is
fitted to the RNN's own times). On a GPU, the same against the GPU's catalog entry, one
small op being a tiny product's share of 1,000 launched back to back, and autograd's
backward being cuDNN's.

Part 2, a whole step: a tagger (an `nn.RNN` of 32 units over 16 inputs, 200 steps, batch
8, then a linear head) profiled, `lightspeed.predict(profile, scan_backward=True)`
against the step of `scan_backward(workload)` measured, both timed by
`lightspeed.time_workload` in turns.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import time

import torch
from torch import nn

import lightspeed
from lightspeed.facts.device import Device
from lightspeed.hardware.resolve import resolve_hardware
from lightspeed.measure.step import StepSettings
from lightspeed.measure.timer import TimerConfig
from lightspeed.optimize import scan_backward
from lightspeed.predict.scan import predict_scan

BATCH, INPUTS = 4, 8


def sync(device: Device) -> None:
    if device is Device.CUDA:
        torch.cuda.synchronize()


def small_op_s(device: Device = Device.CPU, repeats: int = 2000) -> float:
    """The median time of a tiny product (2 × 2 by 2 × 2) on `device`, in seconds: what
    one kernel costs when it does next to nothing. On a GPU, a thousand launched back to
    back, per product (the launch rate, not one launch's latency)."""
    a, b = torch.randn(2, 2, device=device.value), torch.randn(2, 2, device=device.value)
    if device is Device.CUDA:
        rounds = []
        for _ in range(7):
            sync(device)
            start = time.perf_counter()
            for _ in range(1000):
                torch.mm(a, b)
            sync(device)
            rounds.append((time.perf_counter() - start) / 1000)
        return statistics.median(rounds[1:])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def backward_s(
    model: nn.Module, x: torch.Tensor, device: Device = Device.CPU
) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out, _ = model(x)
    loss = out.sum()
    sync(device)
    start = time.perf_counter()
    loss.backward()
    sync(device)
    took = time.perf_counter() - start
    return took, [p.grad for p in model.parameters() if p.grad is not None]


def kernels(model: nn.Module, x: torch.Tensor) -> int:
    """How many GPU kernels one backward of `model` on `x` launches."""
    out, _ = model(x)
    loss = out.sum()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        loss.backward()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def relative(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max(float((g - w).norm() / w.norm()) for g, w in zip(got, want, strict=True))


def part1(rounds: int, device: Device = Device.CPU) -> None:
    hw = resolve_hardware("local", device)
    per_kernel = small_op_s(device)
    print(f"one small op: {per_kernel * 1e6:.2f} µs")
    print(
        "| T | H | autograd | scan | scan / autograd | gradients' difference | levels |"
        " predicted autograd | predicted scan | predicted ratio | FLOPs ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for steps in (1000, 4000, 16000):
        for hidden in (8, 16, 32):
            torch.manual_seed(0)
            plain = nn.RNN(INPUTS, hidden).to(device.value)
            scanned = scan_backward(copy.deepcopy(plain))
            x = torch.randn(steps, BATCH, INPUTS, device=device.value)
            times: dict[str, list[float]] = {"plain": [], "scan": []}
            error = 0.0
            for _ in range(rounds + 1):  # the first round warms up
                t_plain, g_plain = backward_s(plain, x, device)
                t_scan, g_scan = backward_s(scanned, x, device)
                times["plain"].append(t_plain)
                times["scan"].append(t_scan)
                error = relative(g_scan, g_plain)
            a = statistics.median(times["plain"][1:])
            s = statistics.median(times["scan"][1:])
            p = predict_scan(steps, BATCH, hidden, INPUTS, hw, per_kernel_s=per_kernel)
            if device is Device.CUDA:
                print(f"kernels: autograd {kernels(plain, x)}, scan {kernels(scanned, x)}")
            print(
                f"| {steps} | {hidden} | {a * 1e3:.1f} ms | {s * 1e3:.1f} ms | {s / a:.2f} |"
                f" {error:.1e} | {p.levels} | {p.ordinary_s * 1e3:.1f} ms |"
                f" {p.scan_s * 1e3:.2f} ms | {p.scan_s / p.ordinary_s:.2f} |"
                f" {p.work_ratio:.1f} |",
                flush=True,
            )


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(16, 32, batch_first=True)
        self.head = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


def tagger() -> lightspeed.Workload:
    return lightspeed.Workload(
        name="tagger",
        model=Tagger,
        batch=lambda n: (torch.randn(n, 200, 16), torch.randint(0, 8, (n, 200))),
        loss=lambda m, b: nn.functional.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten()),
        batch_size=8,
    )


def part2(rounds: int, budget: float, device: Device = Device.CPU) -> None:
    workload = tagger()
    settings = StepSettings(device=device)
    profile = lightspeed.profile(workload, device=device, budget_s=budget)
    predicted = lightspeed.predict(profile, workload=workload, scan_backward=True)
    scanned = scan_backward(workload)
    steps: dict[str, list[float]] = {"plain": [], "scan": []}
    for _ in range(rounds):
        for name, w in (("plain", workload), ("scan", scanned)):
            timing = lightspeed.time_workload(w, settings, config=TimerConfig(budget_s=budget))
            steps[name].append(timing.measurement.median_s)
    plain_s = statistics.median(steps["plain"])
    scan_s = statistics.median(steps["scan"])
    assert profile.step_time_s is not None and predicted.step_time_s is not None
    made = predicted.prediction
    assert made is not None
    scan = made.scans[0]
    print()
    print("| | step | RNN backward |")
    print("|---|---|---|")
    ms = 1e3
    print(
        f"| profiled (plain) | {profile.step_time_s * ms:.2f} ms | {scan.measured_s * ms:.2f} ms |"
    )
    print(
        f"| predicted with the scan | {predicted.step_time_s * ms:.2f} ms"
        f" | {scan.predicted_s * ms:.2f} ms |"
    )
    print(f"| measured, plain (median of {rounds}) | {plain_s * 1e3:.2f} ms | |")
    print(f"| measured, with the scan (median of {rounds}) | {scan_s * 1e3:.2f} ms | |")
    ratio_predicted = predicted.step_time_s / profile.step_time_s
    ratio_measured = scan_s / plain_s
    print(
        f"\nstep with the scan / plain: predicted {ratio_predicted:.2f}, measured"
        f" {ratio_measured:.2f} (error of the predicted step:"
        f" {abs(ratio_predicted / ratio_measured - 1):.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds a step timing takes")
    parser.add_argument("--part", choices=["1", "2", "both"], default="both")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    device = Device.parse(args.device)
    print(f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    if device is Device.CUDA:
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.part in ("1", "both"):
        part1(args.rounds, device)
    if args.part in ("2", "both"):
        part2(args.rounds, args.budget, device)


if __name__ == "__main__":
    main()
