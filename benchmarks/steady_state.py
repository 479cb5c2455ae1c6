"""Does a freshly built training step run as fast as a long-lived one, and when?

For each workload and allocator setting, in a process of its own:

1. series: build the model and step it, every step timed (wall time, the kernel's CPU
   time, minor page faults), for at least --series steps and --series-s seconds: how far
   and how long a fresh model's step time drifts. That model then lives on as the
   long-lived copy.
2. rounds: --rounds interleaved rounds of (a) `lightspeed.time_workload(w)`, which builds
   the model afresh, and (b) `time_step` (lightspeed's timer) on the long-lived copy. A
   round's ratio is (a)'s median over (b)'s; the figure is the median of the ratios.
   Page faults per step come from a probe in the workload's loss, called once a step.

Allocators: `default` is glibc as it comes (until the first round, where lightspeed's
timer tells glibc to keep freed memory, measure/allocator.py); `pinned` starts the
process with
MALLOC_TRIM_THRESHOLD_=1 TiB (never give the top of the heap back) and MALLOC_MMAP_MAX_=0
(no block gets a mapping of its own), so memory freed by one step is reused by the next
instead of being returned to the OS and faulted in again.

Last, warm-up rules are simulated on each series: "warm up in blocks the timer's size
(≥ 5 ms); stop when the median of the last k blocks is within x of the median of the k
before, or at M seconds", beside today's 3 steps. For each: warm-up steps and seconds,
whether it settled, and the gap: the median of the blocks the timer would then time
over the series' steady median (the median of its last half).

    PYTHONPATH=src .bench-venv/bin/python benchmarks/steady_state.py   # BERT-base, ~10 min
    PYTHONPATH=src .venv/bin/python benchmarks/steady_state.py mlp-tiny gpt2-tiny  # ~2 min

(`--allocator default` alone halves the BERT run; `--save`/`--load` keep a run to report
again.)

`bert-base-mlm` is BERT-base (110 M parameters) from `transformers` (third_party.py),
fp32, AdamW, batch 1; other names are suite workloads. Target: the median
ratio of (a) over (b) within 5 % of 1 on BERT-base.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

import lightspeed
from lightspeed.facts.device import Device
from lightspeed.measure.device import device_name
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.measure.timer import MIN_BLOCK_S
from lightspeed.measure.workload_timing import time_step
from lightspeed.workload import Workload
from processes import last_line, run_in_own_group

REPO = Path(__file__).resolve().parents[1]
BERT = "bert-base-mlm"
ALLOCATOR_ENV = {
    "default": {},
    "pinned": {"MALLOC_TRIM_THRESHOLD_": str(1 << 40), "MALLOC_MMAP_MAX_": "0"},
}
# TimerConfig()'s defaults: the budget (warm-up included) and the fewest blocks timed.
BUDGET_S = 2.0
MIN_REPLICATES = 5
CURRENT_WARMUP_STEPS = 3  # TimerConfig().warmup_steps
# Simulated settle rules: (blocks per window k, tolerance x, one-sided); at most RULE_MAX_S
# seconds. One-sided: only a previous window slower than the last by more than x counts
# as drift (warm-up makes early steps slower, never faster; a slower last window is noise).
RULES = ((3, 0.05, False), (2, 0.05, True), (3, 0.03, True), (3, 0.05, True))
RULE_MAX_S = 15.0


def usage() -> tuple[int, float, float]:
    """(minor page faults, kernel CPU s, all CPU s) of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_minflt, ru.ru_stime, ru.ru_utime + ru.ru_stime


@dataclasses.dataclass
class StepProbe:
    """(clock, minor faults, kernel CPU s, all CPU s) at every call of a workload's loss,
    which a training step makes once."""

    marks: list[tuple[float, int, float, float]] = dataclasses.field(default_factory=list)

    def watch(self, workload: Workload) -> Workload:
        """`workload` with this probe marking every call of its loss."""
        inner = workload.loss

        def loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
            self.marks.append((time.perf_counter(), *usage()))
            return inner(model, batch)

        return dataclasses.replace(workload, loss=loss)

    def last_steps(self, n: int) -> dict[str, float]:
        """Median faults, kernel and all CPU milliseconds per step over the last `n`
        steps (the spans between consecutive loss calls)."""
        spans = list(zip(self.marks[-n - 1 : -1], self.marks[-n:], strict=True))
        return {
            "faults": statistics.median(b[1] - a[1] for a, b in spans),
            "sys_ms": statistics.median(b[2] - a[2] for a, b in spans) * 1e3,
            "cpu_ms": statistics.median(b[3] - a[3] for a, b in spans) * 1e3,
        }


def build(name: str) -> Workload:
    if name == BERT:
        from third_party import bert_base_mlm

        return bert_base_mlm(batch_size=1)
    return lightspeed.load_target(name)


def child(name: str, rounds: int, series_steps: int, series_s: float) -> dict[str, Any]:
    """Measure `name` in this process: the series of a fresh model, then the rounds.
    A series row is (wall s, minor faults, kernel CPU s, all CPU s) of one step."""
    workload = build(name)
    live_probe = StepProbe()
    live = prepare(live_probe.watch(workload), StepSettings())
    series = []
    start = time.perf_counter()
    while len(series) < series_steps or time.perf_counter() - start < series_s:
        before = usage()
        t0 = time.perf_counter()
        live.step()
        t1 = time.perf_counter()
        series.append((t1 - t0, *(a - b for a, b in zip(usage(), before, strict=True))))
    results = []
    for _ in range(rounds):
        fresh_probe = StepProbe()
        fresh = lightspeed.time_workload(fresh_probe.watch(workload)).measurement
        long_lived = time_step(live).measurement
        noise = [m.noise for m in (fresh, long_lived) if m.noise is not None]
        results.append(
            {
                "fresh_s": fresh.median_s,
                "live_s": long_lived.median_s,
                "fresh": fresh_probe.last_steps(fresh.total_steps - 1),
                "live": live_probe.last_steps(long_lived.total_steps - 1),
                "steal": max((n.steal_share or 0.0 for n in noise), default=0.0),
                "canary": max((abs(n.canary_drift or 0.0) for n in noise), default=0.0),
            }
        )
    return {"series": series, "rounds": results}


@dataclasses.dataclass(frozen=True)
class Warmup:
    steps: int
    seconds: float
    settled: bool
    gap: float | None  # median of the timed blocks after it over the steady median


def simulate(
    durations: Sequence[float],
    stop: Callable[[list[float], int, float], bool | None],
    *,
    sized_blocks: bool = True,
) -> Warmup:
    """Warm up over recorded per-step `durations` in blocks (timer-sized, ≥ MIN_BLOCK_S,
    or single steps) until `stop(block_means, steps, seconds)` says True (settled) or
    False (gave up); then time timer-sized blocks until BUDGET_S from the start (and at
    least MIN_REPLICATES), as the timer does."""
    blocks: list[float] = []
    i, spent, size = 0, 0.0, 1
    settled: bool | None = None
    while settled is None and i + size <= len(durations):
        chunk = durations[i : i + size]
        blocks.append(sum(chunk) / size)
        i, spent = i + size, spent + sum(chunk)
        size = max(1, math.ceil(MIN_BLOCK_S / blocks[-1])) if sized_blocks else 1
        settled = stop(blocks, i, spent)
    size = max(1, math.ceil(MIN_BLOCK_S / blocks[-1]))
    steady = statistics.median(durations[len(durations) // 2 :])
    warmup_steps, warmup_s = i, spent
    timed: list[float] = []
    while i + size <= len(durations) and (len(timed) < MIN_REPLICATES or spent < BUDGET_S):
        timed.append(statistics.fmean(durations[i : i + size]))
        i, spent = i + size, spent + sum(durations[i : i + size])
    gap = statistics.median(timed) / steady if len(timed) >= MIN_REPLICATES else None
    return Warmup(warmup_steps, warmup_s, bool(settled), gap)


def fixed_steps(n: int) -> Callable[[list[float], int, float], bool | None]:
    return lambda blocks, steps, seconds: True if steps >= n else None


def window_rule(
    k: int, tolerance: float, one_sided: bool
) -> Callable[[list[float], int, float], bool | None]:
    """Settled when the median of the last k blocks is within `tolerance` of the median
    of the k before (one-sided: the k before are not slower by more than `tolerance`),
    after at least CURRENT_WARMUP_STEPS steps; gives up at RULE_MAX_S."""

    def stop(blocks: list[float], steps: int, seconds: float) -> bool | None:
        if steps >= CURRENT_WARMUP_STEPS and len(blocks) >= 2 * k:
            drift = statistics.median(blocks[-2 * k : -k]) / statistics.median(blocks[-k:]) - 1
            if drift <= tolerance and (one_sided or drift >= -tolerance):
                return True
        return False if seconds >= RULE_MAX_S else None

    return stop


def print_rounds(rounds: list[dict[str, Any]]) -> None:
    print(
        "  rounds: (a) time_workload on a fresh build, (b) the timer on the long-lived copy;"
        " per timed step: minor faults, kernel ms, CPU-time ratio; the noise check's worst"
        " steal and canary drift\n"
        f"  {'round':<7}{'(a) ms':>10}{'(b) ms':>10}{'ratio':>7}{'(a) faults':>11}"
        f"{'(b) faults':>11}{'(a) sys':>9}{'(b) sys':>9}{'cpu ratio':>10}{'steal':>7}"
        f"{'canary':>8}"
    )
    for i, r in enumerate(rounds):
        fresh, live = r["fresh"], r["live"]
        print(
            f"  {i:<7}{r['fresh_s'] * 1e3:>10.2f}{r['live_s'] * 1e3:>10.2f}"
            f"{r['fresh_s'] / r['live_s']:>7.3f}{fresh['faults']:>11.0f}{live['faults']:>11.0f}"
            f"{fresh['sys_ms']:>9.1f}{live['sys_ms']:>9.1f}"
            f"{fresh['cpu_ms'] / live['cpu_ms']:>10.3f}{100 * r['steal']:>6.0f}%"
            f"{100 * r['canary']:>7.0f}%"
        )
    ratios = [r["fresh_s"] / r["live_s"] for r in rounds]
    cpu = [r["fresh"]["cpu_ms"] / r["live"]["cpu_ms"] for r in rounds]
    print(
        f"  median ratio (a)/(b): {statistics.median(ratios):.3f} wall time,"
        f" {statistics.median(cpu):.3f} CPU time"
    )


def print_series(series: list[list[float]]) -> None:
    durations = [s[0] for s in series]
    half = series[len(series) // 2 :]
    steady = statistics.median(s[0] for s in half)
    steady_cpu = statistics.median(s[3] for s in half)
    print(
        f"  series: a fresh model in a process of its own, {len(series)} steps in"
        f" {sum(durations):.1f} s; steady (median of the last half) {steady * 1e3:.2f} ms\n"
        f"  {'steps':<11}{'wall/steady':>12}{'cpu/steady':>11}{'faults':>10}{'sys ms':>9}"
    )
    lo = 0
    while lo < len(series):
        hi = min(len(series), max(lo + 1, 2 * lo))
        part = series[lo:hi]
        print(
            f"  {f'{lo}-{hi - 1}' if hi - lo > 1 else str(lo):<11}"
            f"{statistics.median(p[0] for p in part) / steady:>12.3f}"
            f"{statistics.median(p[3] for p in part) / steady_cpu:>11.3f}"
            f"{statistics.median(p[1] for p in part):>10.0f}"
            f"{statistics.median(p[2] for p in part) * 1e3:>9.1f}"
        )
        lo = hi
    print(
        f"  warm-up rules on the series (gap: the median of the blocks the timer would time"
        f" after it, within {BUDGET_S:g} s and at least {MIN_REPLICATES}, over the steady"
        " median)\n"
        f"  {'rule':<34}{'steps':>7}{'seconds':>9}{'settled':>9}{'gap':>7}"
    )
    today = simulate(durations, fixed_steps(CURRENT_WARMUP_STEPS), sized_blocks=False)
    rows = [(f"{CURRENT_WARMUP_STEPS} steps (today)", today)]
    for k, x, one_sided in RULES:
        label = f"k={k} {'≤' if one_sided else '±'}{100 * x:.0f}%, at most {RULE_MAX_S:.0f} s"
        rows.append((label, simulate(durations, window_rule(k, x, one_sided))))
    for label, w in rows:
        gap = f"{w.gap:.3f}" if w.gap is not None else "-"
        print(f"  {label:<34}{w.steps:>7}{w.seconds:>9.2f}{w.settled!s:>9}{gap:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=[BERT])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--series", type=int, default=30, help="steps in the series, at least")
    parser.add_argument("--series-s", type=float, default=5.0, help="seconds, at least")
    parser.add_argument("--allocator", nargs="+", choices=sorted(ALLOCATOR_ENV))
    parser.add_argument("--save", type=Path, help="write every measurement to this JSON")
    parser.add_argument("--load", type=Path, help="report a saved run instead of measuring")
    parser.add_argument(
        "--child", nargs=2, metavar=("WORKLOAD", "ALLOCATOR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        data = child(args.child[0], args.rounds, args.series, args.series_s)
        print(json.dumps(data))
        return
    print(
        f"machine: {device_name(Device.CPU)}, {torch.get_num_threads()} threads,"
        f" torch {torch.__version__}, Python {platform.python_version()}, glibc"
        f" {platform.libc_ver()[1]}"
    )
    if args.load:
        runs = json.loads(args.load.read_text())
    else:
        runs = {}
        for name in args.workloads:
            for allocator in args.allocator or ["default", "pinned"]:
                runs[f"{name} {allocator}"] = measure_in_child(name, allocator, args)
        if args.save:
            args.save.write_text(json.dumps(runs))
    for key, data in runs.items():
        name, allocator = key.rsplit(" ", 1)
        if data is None:
            continue
        print(f"\n{name}, allocator {allocator}")
        if data["rounds"]:
            print_rounds(data["rounds"])
        print_series(data["series"])


def measure_in_child(name: str, allocator: str, args: argparse.Namespace) -> dict[str, Any] | None:
    env = [f"{k}={v}" for k, v in ALLOCATOR_ENV[allocator].items()]
    command = [
        "env",
        *env,
        sys.executable,
        __file__,
        *("--child", name, allocator),
        *("--rounds", str(args.rounds), "--series", str(args.series)),
        *("--series-s", str(args.series_s)),
    ]
    done = run_in_own_group(command, REPO, timeout_s=1200)
    if done is None or done[0] != 0:
        why = "timed out" if done is None else last_line(done[2])
        print(f"{name} ({allocator}): failed: {why}")
        return None
    result: dict[str, Any] = json.loads(done[1].splitlines()[-1])
    return result


if __name__ == "__main__":
    main()
