"""What a profile costs beyond its warm-up, in steps of the same workload.

For each workload, --rounds interleaved rounds of:

(a) `lightspeed profile W --json F`, a process of its own: its wall time, and from F the
    warm-up it reports (`timing.warmup_s`);
(b) `lightspeed time W --json G`: the plain timing of the step (`timing.median_s`).

A round's cost is (a)'s wall time less its reported warm-up, in seconds and in steps of
(b)'s median; the figure is the median over rounds. "whole" holds everything the user
waits for but the warm-up: Python's and torch's imports, building the model, the timer's
replicates, the watched step (ops and memory), the profiled steps, the report. "after"
is what follows the warm-up's end: the replicates, the watched step, the profiled steps
and the report (the profile runs through a wrapper that notes, on stderr, when the
"timing the step" stage opens and when the command ends). The first hour's bound is
max(8 steps, 10 s).

With --stages, one more profile runs in this process, with a listener on
`lightspeed.progress`, and prints each stage's wall time in steps of its own median.

    PYTHONPATH=src .venv/bin/python benchmarks/profile_cost.py mlp-tiny
    PYTHONPATH=src .venv/bin/python benchmarks/profile_cost.py gpt2-small --batch-size 1 --rounds 3

The calibration must be cached first (`lightspeed hw calibrate`), or the first round
pays for it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIGHTSPEED = [sys.executable, "-m", "lightspeed"]
# Runs the CLI, noting on stderr (epoch seconds) when timing starts and when it ends.
WRAPPED = [
    sys.executable,
    "-c",
    "import sys, time\n"
    "from lightspeed import progress\n"
    "from lightspeed.cli import main\n"
    "seen = []\n"
    "def listen(open_now):\n"
    "    if open_now[:1] == ('timing the step',) and not seen:\n"
    "        seen.append(1)\n"
    "        print(f'TIMING_STARTS {time.time()}', file=sys.stderr, flush=True)\n"
    "try:\n"
    "    with progress.listening(listen):\n"
    "        main(sys.argv[1:])\n"
    "finally:\n"
    "    print(f'ENDS {time.time()}', file=sys.stderr, flush=True)\n",
]
BOUND_STEPS = 8
BOUND_S = 10.0


def _run(
    args: list[str], json_path: Path, command: list[str] = LIGHTSPEED
) -> tuple[float, dict[str, object], dict[str, float]]:
    """Wall seconds of `lightspeed ARGS --json PATH`, the document it wrote, and the
    epoch times a wrapped command noted on stderr."""
    start = time.perf_counter()
    done = subprocess.run(
        [*command, *args, "--json", str(json_path)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - start
    noted = {
        words[0]: float(words[1])
        for line in done.stderr.splitlines()
        if len(words := line.split()) == 2 and words[0] in ("TIMING_STARTS", "ENDS")
    }
    return wall, json.loads(json_path.read_text()), noted


def one_round(workload: str, extra: list[str], tmp: Path) -> dict[str, float]:
    """Profile, then plain timing, of `workload`: one round's figures."""
    profile_wall, profile, noted = _run(
        ["profile", workload, *extra], tmp / "profile.json", WRAPPED
    )
    time_wall, plain, _ = _run(["time", workload, *extra], tmp / "time.json")
    timing = profile["timing"]
    assert isinstance(timing, dict)
    plain_timing = plain["timing"]
    assert isinstance(plain_timing, dict)
    step_s = float(plain_timing["median_s"])
    beyond_s = profile_wall - float(timing["warmup_s"])
    after_s = noted["ENDS"] - noted["TIMING_STARTS"] - float(timing["warmup_s"])
    return {
        "profile_wall_s": profile_wall,
        "profile_warmup_s": float(timing["warmup_s"]),
        "profile_warmup_steps": float(timing["warmup_steps"]),
        "profile_median_s": float(timing["median_s"]),
        "time_wall_s": time_wall,
        "step_s": step_s,
        "beyond_s": beyond_s,
        "beyond_steps": beyond_s / step_s,
        "after_s": after_s,
        "after_steps": after_s / step_s,
    }


def stages(workload: str, batch_size: int | None) -> None:
    """One profile in this process: each stage's wall time, in steps of its median."""
    import lightspeed
    from lightspeed import progress

    marks: list[tuple[float, tuple[str, ...]]] = []
    start = time.perf_counter()
    with progress.listening(lambda open_now: marks.append((time.perf_counter(), open_now))):
        profile = lightspeed.profile(workload, batch_size=batch_size)
    end = time.perf_counter()
    assert profile.timing is not None
    step_s = profile.timing.median_s
    spent: dict[str, float] = {}
    for (t, open_now), (t_next, _) in zip(marks, [*marks[1:], (end, ())], strict=True):
        top = open_now[0] if open_now else "(between stages)"
        spent[top] = spent.get(top, 0.0) + t_next - t
    m = profile.timing
    print(
        f"{workload}: step {step_s:.4g} s, {m.n} replicates, warm-up {m.warmup_s:.3g} s "
        f"({m.warmup_steps} steps, settled: {m.settled}), in all {end - start:.3g} s"
    )
    for name, seconds in spent.items():
        print(f"  {name:45s} {seconds:8.3f} s  {seconds / step_s:6.2f} steps")
    timing_beyond = spent.get("timing the step", 0.0) - (m.warmup_s or 0.0)
    print(
        f"  {'timing, beyond the warm-up':45s} {timing_beyond:8.3f} s  "
        f"{timing_beyond / step_s:6.2f} steps"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stages", action="store_true")
    args = parser.parse_args()
    extra = ["--batch-size", str(args.batch_size)] if args.batch_size else []
    for workload in args.workloads:
        if args.stages:
            stages(workload, args.batch_size)
        with tempfile.TemporaryDirectory() as tmp:
            rounds = [one_round(workload, extra, Path(tmp)) for _ in range(args.rounds)]
        for k, r in enumerate(rounds, 1):
            print(
                f"{workload} round {k}: profile {r['profile_wall_s']:.3g} s "
                f"(warm-up {r['profile_warmup_s']:.3g} s, {r['profile_warmup_steps']:.0f} "
                f"steps), time {r['time_wall_s']:.3g} s, step {r['step_s']:.4g} s: beyond "
                f"the warm-up {r['beyond_s']:.3g} s = {r['beyond_steps']:.2f} steps whole, "
                f"{r['after_s']:.3g} s = {r['after_steps']:.2f} steps after it"
            )
        beyond_s = statistics.median(r["beyond_s"] for r in rounds)
        beyond_steps = statistics.median(r["beyond_steps"] for r in rounds)
        after_s = statistics.median(r["after_s"] for r in rounds)
        after_steps = statistics.median(r["after_steps"] for r in rounds)
        bound_s = max(BOUND_STEPS * statistics.median(r["step_s"] for r in rounds), BOUND_S)
        for what, seconds, steps in (
            ("whole process", beyond_s, beyond_steps),
            ("after the warm-up", after_s, after_steps),
        ):
            verdict = "within" if seconds <= bound_s else "ABOVE"
            print(
                f"{workload}: median beyond the warm-up, {what}: {seconds:.3g} s ="
                f" {steps:.2f} steps; {verdict} max({BOUND_STEPS} steps, {BOUND_S:g} s) ="
                f" {bound_s:.3g} s"
            )


if __name__ == "__main__":
    main()
