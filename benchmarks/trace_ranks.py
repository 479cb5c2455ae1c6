"""Many ranks' traces read by `lightspeed trace` here (a pool of processes) and on a Dask
cluster (a local one), timed, their results compared.

    .venv/bin/python benchmarks/synthetic_trace.py --out /tmp/ranks64 --mb 50 --ranks 64
    .venv/bin/python benchmarks/trace_ranks.py /tmp/ranks64 --rounds 2

(64 ranks of 50 MB: 3.2 GB of disk.) Each round runs `lightspeed trace DIR --json OUT`
and `lightspeed trace DIR --executor dask --json OUT` in fresh processes, in turn; the
two results must be the same JSON, their creation time aside.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIGHTSPEED = [sys.executable, "-m", "lightspeed"]
EXECUTORS = ("local", "dask")


def run(folder: Path, executor: str, out: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [*LIGHTSPEED, "trace", str(folder), "--executor", executor, "--json", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def result(path: Path) -> dict[str, object]:
    found: dict[str, object] = json.loads(path.read_bytes())
    found.pop("created_at")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    files = sorted(args.folder.glob("*.json*"))
    size = sum(f.stat().st_size for f in files) / 1e6
    times: dict[str, list[float]] = {e: [] for e in EXECUTORS}
    with tempfile.TemporaryDirectory() as scratch:
        outs = {e: Path(scratch) / f"{e}.json" for e in EXECUTORS}
        for r in range(args.rounds):
            for executor in EXECUTORS:
                times[executor].append(run(args.folder, executor, outs[executor]))
                print(f"round {r + 1}: {executor} {times[executor][-1]:.1f} s", file=sys.stderr)
        same = result(outs["local"]) == result(outs["dask"])
    print(f"{len(files)} ranks, {size:,.0f} MB, {os.cpu_count()} cores, {args.rounds} round(s)")
    for executor in EXECUTORS:
        print(
            f"  {executor:5}  median {statistics.median(times[executor]):.1f} s  {times[executor]}"
        )
    print(f"  the same JSON: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
