"""Each GPU trace's steps replayed from its dependency graph, unchanged
(`lightspeed.trace.replay`): the replayed step against the traced one, and the device's
idle share, per trace.

    PYTHONPATH=src .venv/bin/python benchmarks/trace_replay.py ../shared/traces tests/data/gpu

Every `.json.gz` trace under the folders given with `ProfilerStep` markers, leaving out
the sampled 128-rank recommendation traces, the CPU-only one and MTIA's (no GPU
streams), lightspeed's own profiles, and each trace's last step (cut by the profiler).
Prints one row per trace: its steps, the largest and the median |error| of the replayed
step durations, the largest difference of the device's idle share in points, the graph's
size and the replay's time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from lightspeed.trace.load import load_trace
from lightspeed.trace.replay import replay_steps, summary

LEFT_OUT = ("128ranks-sampled", "cpu-only", "mtia")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    print(
        "| trace | steps | largest error | median error | idle, points | host tasks |"
        " device tasks | syncs | replay |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for folder in args.folders:
        for path in sorted(folder.rglob("*.json.gz")):
            if any(part in path.name for part in LEFT_OUT) or ".profile." in path.name:
                continue
            trace = load_trace(path)
            start = time.perf_counter()
            replay = replay_steps(trace)
            took = time.perf_counter() - start
            if not replay.steps:
                continue
            largest, median = summary(replay.steps)
            idle = max(abs(s.idle_points) for s in replay.steps)
            name = path.name.removesuffix(".json.gz").removesuffix(".pt.trace")
            print(
                f"| {name} | {len(replay.steps)} | {largest:.2%} | {median:.2%} | {idle:.1f} |"
                f" {replay.host_tasks:,} | {replay.device_tasks:,} | {replay.syncs} |"
                f" {took:.2f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
