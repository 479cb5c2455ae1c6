"""How `lightspeed trace` scales with a trace's size: wall time and peak memory of the
whole command, per MB of trace.

    .venv/bin/python benchmarks/synthetic_trace.py --out /tmp/synth100.json --mb 100
    .venv/bin/python benchmarks/synthetic_trace.py --out /tmp/synth300.json --mb 300
    .venv/bin/python benchmarks/synthetic_trace.py --out /tmp/synth1000.json --mb 1000
    .venv/bin/python benchmarks/trace_scale.py /tmp/synth100.json /tmp/synth300.json \\
        /tmp/synth1000.json

Each file is analysed by `lightspeed trace FILE --json OUT` (with `--html`, `--html PAGE`
too) in a fresh process, `--rounds` times, the files taking turns. Memory is sampled
every 50 ms: the command's own resident set, and the proportional set (PSS) of it and
every process it starts (the reader and the analysis fork one; pages they share count
once), whose peak is what the machine had to hold. The table gives each file's median
round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIGHTSPEED = [sys.executable, "-m", "lightspeed"]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _kb(pid: int, field: str, rollup: bool) -> int:
    path = f"/proc/{pid}/smaps_rollup" if rollup else f"/proc/{pid}/status"
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run(path: Path, html: bool = False) -> dict[str, float]:
    """One `lightspeed trace` of `path` (with `html`, its HTML report too): seconds, peak
    PSS of the process tree (MB), peak resident set of the command itself (MB)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "t.json"
        page = ["--html", str(Path(folder) / "t.html")] if html else []
        started = time.perf_counter()
        proc = subprocess.Popen(
            [*LIGHTSPEED, "trace", str(path), "--json", str(out), *page],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        pss = rss = 0
        while proc.poll() is None:
            tree = [proc.pid]
            for pid in tree:
                tree += _children(pid)
            pss = max(pss, sum(_kb(p, "Pss:", True) for p in tree))
            rss = max(rss, _kb(proc.pid, "VmHWM:", False))
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"{path}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return {"s": seconds, "pss_mb": pss / 1024, "rss_mb": rss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--html", action="store_true", help="write the HTML report too")
    args = parser.parse_args()
    found: dict[Path, list[dict[str, float]]] = {p: [] for p in args.traces}
    for r in range(args.rounds):
        for path in args.traces:
            found[path].append(run(path, args.html))
            print(f"round {r + 1}: {path.name} {found[path][-1]}", file=sys.stderr, flush=True)
    print(f"{os.cpu_count()} cores; median of {args.rounds} round(s)")
    print("| trace | MB | time | s per 100 MB | peak PSS (all processes) | MB per MB | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for path, runs in found.items():
        mb = path.stat().st_size / 1e6
        middle = sorted(runs, key=lambda x: x["s"])[len(runs) // 2]
        print(
            f"| {path.name} | {mb:,.0f} | {middle['s']:.1f} s | {100 * middle['s'] / mb:.2f} s"
            f" | {middle['pss_mb']:,.0f} MB | {middle['pss_mb'] / mb:.2f}"
            f" | {statistics.median(x['rss_mb'] for x in runs):,.0f} MB |"
        )


if __name__ == "__main__":
    main()
