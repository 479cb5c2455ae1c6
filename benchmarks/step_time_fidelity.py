"""Does instrumentation leak into the step time lightspeed reports?

For each workload, in alternating rounds: time a fresh build of the training step
with `torch.utils.benchmark.Timer.blocked_autorange` (no lightspeed code in the timed
statement), then run the whole `lightspeed.profile` (timing, op capture, profiled
run, memory) and take the step time it reports. A round's ratio is lightspeed's
median over the reference median; the figure is the median ratio over the rounds.
The reference is timed again after each profile, so a hook or mode left behind by
the profile would show as a slower "after" time.

    .venv/bin/python benchmarks/step_time_fidelity.py [--rounds 3] [--min-run-time 2]

Target: every workload's median ratio within 5 % of 1.
"""

from __future__ import annotations

import argparse
import platform
import statistics
from collections.abc import Callable

import torch
import torch.utils.benchmark as torch_benchmark

import lightspeed
from lightspeed.facts.device import Device
from lightspeed.measure.device import device_name
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.workload.targets import load_target

WORKLOADS = ("mlp", "mlp-tiny", "gpt2-tiny", "resnet18-tiny", "transformer-encoder-tiny")


def reference_step(name: str) -> Callable[[], None]:
    """A plain training step of the suite workload `name`: no lightspeed code runs in it."""
    prepared = prepare(load_target(name), StepSettings())
    model, optimizer, batch = prepared.model, prepared.optimizer, prepared.batch
    loss_fn = prepared.workload.loss

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        optimizer.step()

    step()  # optimizer state is created on the first step
    return step


def reference_timing(step: Callable[[], None], min_run_time: float) -> tuple[float, float]:
    """(median, fastest) seconds per step from torch.utils.benchmark."""
    timer = torch_benchmark.Timer(
        stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads()
    )
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return m.median, min(m.times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-run-time", type=float, default=2.0)
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    print(
        f"machine: {device_name(Device.CPU)}, {torch.get_num_threads()} threads,"
        f" torch {torch.__version__}, Python {platform.python_version()}"
    )
    print(
        "medians over rounds; ratio = lightspeed / reference of the same round (median"
        " ratio, and ratio of the fastest replicates); spread = max/min reference median"
    )
    print(
        f"{'workload':<26}{'reference':>11}{'lightspeed':>11}{'after':>11}"
        f"{'ratio':>7}{'fastest':>9}{'after/ref':>11}{'spread':>8}"
    )
    for name in args.workloads:
        rows = [_round(name, args.min_run_time) for _ in range(args.rounds)]
        refs = [r[0] for r in rows]
        print(
            f"{name:<26}{statistics.median(refs) * 1e3:>9.3f}ms"
            f"{statistics.median(r[2] for r in rows) * 1e3:>9.3f}ms"
            f"{statistics.median(r[4] for r in rows) * 1e3:>9.3f}ms"
            f"{statistics.median(r[2] / r[0] for r in rows):>7.3f}"
            f"{statistics.median(r[3] / r[1] for r in rows):>9.3f}"
            f"{statistics.median(r[4] / r[0] for r in rows):>11.3f}"
            f"{max(refs) / min(refs):>8.2f}"
        )


def _round(name: str, min_run_time: float) -> tuple[float, float, float, float, float]:
    """(reference median, reference fastest, lightspeed median, lightspeed fastest,
    reference median after the profile), seconds per step."""
    ref, ref_fastest = reference_timing(reference_step(name), min_run_time)
    profile = lightspeed.profile(name, budget_s=min_run_time)
    assert profile.timing is not None
    after, _ = reference_timing(reference_step(name), min_run_time)
    return ref, ref_fastest, profile.timing.median_s, profile.timing.min_s, after


if __name__ == "__main__":
    main()
