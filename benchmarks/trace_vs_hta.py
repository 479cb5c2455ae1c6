"""Wall time and peak memory of HolisticTraceAnalysis (HTA) against lightspeed on the same
Kineto traces.

For each trace file, the file is copied alone into its own temporary directory (HTA reads
every *.json / *.gz file of a directory as a rank's trace), and each tool runs there in a
fresh process, `--repeats` rounds after one not counted (it writes each tool's bytecode
where none is yet, as a pip install does, and reads the trace into the page cache), the
tools taking turns within each round:

- HTA: `TraceAnalysis(trace_dir=...)` followed by its five main analyses,
  `get_temporal_breakdown`, `get_idle_time_breakdown`, `get_gpu_kernel_breakdown`,
  `get_cuda_kernel_launch_stats` and `get_comm_comp_overlap`, all with `visualize=False`,
  run by the Python of a separate virtual environment (HTA 0.5.x pins pandas, plotly and
  jupyterlab, which lightspeed's environment does not want);
- lightspeed: `lightspeed trace FILE --json OUT`.

Each run goes through `/usr/bin/time` (GNU time): its peak resident set size is that of
the measured program alone. lightspeed reads a large trace on two processes, the second a
fork of the first that shares its pages; the figure is the first one's, and even counting
every page of both twice lightspeed's total stays under twice it. `os.wait4` or
`RUSAGE_CHILDREN` from this Python process would not do: on Linux a child's high-water
mark starts at its parent's RSS at fork time. Wall
time is taken here around the whole process, interpreter start and imports included, as a
user of either tool waits for it. The table gives the median wall time and the largest
peak RSS over the repeats, and HTA/lightspeed ratios of both (above 1: lightspeed is
faster / smaller).

HTA environment, once (HTA 0.5 does not need torch):

    python3 -m venv .bench-venv
    .bench-venv/bin/pip install "HolisticTraceAnalysis>=0.5,<0.6"

Run, from the repository root:

    .venv/bin/python benchmarks/trace_vs_hta.py [TRACE ...] [--repeats 3]
        [--hta-python .bench-venv/bin/python] [--tools hta lightspeed]

Without TRACE arguments it takes the three largest trace files in ../shared/traces
(beside the repository; `--traces-dir` changes it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from processes import last_line, run_in_own_group

REPO = Path(__file__).resolve().parents[1]
GNU_TIME = "/usr/bin/time"
TRACE_SUFFIXES = (".json", ".json.gz", ".gz")

# Run by the HTA environment's Python as `python -c HTA_PROGRAM TRACE_DIR INCLUDE_LAST_STEP`.
# Prints one JSON line on stdout: versions, the ranks HTA found, the rows it kept per rank,
# and the seconds (or the error) of each phase. An analysis that raises is reported, and
# the others still run.
HTA_PROGRAM = r"""
import json, platform, sys, time, traceback
t0 = time.perf_counter()
import importlib.metadata as metadata
import pandas
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=sys.argv[2] == "1")
t2 = time.perf_counter()
ranks = sorted(analyzer.t.traces)
analyses = {
    "temporal_breakdown": lambda: analyzer.get_temporal_breakdown(visualize=False),
    "idle_time_breakdown": lambda: analyzer.get_idle_time_breakdown(
        ranks=ranks, visualize=False, visualize_pctg=False
    ),
    "gpu_kernel_breakdown": lambda: analyzer.get_gpu_kernel_breakdown(visualize=False),
    "cuda_kernel_launch_stats": lambda: analyzer.get_cuda_kernel_launch_stats(
        ranks=ranks, visualize=False
    ),
    "comm_comp_overlap": lambda: analyzer.get_comm_comp_overlap(visualize=False),
}
results = {}
for name, call in analyses.items():
    start = time.perf_counter()
    try:
        call()
        results[name] = {"ok": True, "seconds": time.perf_counter() - start}
    except Exception as exc:
        traceback.print_exc()
        results[name] = {
            "ok": False,
            "seconds": time.perf_counter() - start,
            "error": f"{type(exc).__name__}: {exc}"[:300],
        }
print(json.dumps({
    "python": platform.python_version(),
    "hta": metadata.version("HolisticTraceAnalysis"),
    "pandas": pandas.__version__,
    "ranks": ranks,
    "rows": {str(r): len(df) for r, df in analyzer.t.traces.items()},
    "import_s": t1 - t0,
    "load_s": t2 - t1,
    "analyses": results,
}))
"""


@dataclass(frozen=True)
class Run:
    """One measured process: wall seconds, peak RSS, and why it failed (None: it did not)."""

    wall_s: float
    peak_rss_kib: int | None
    failure: str | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Summary:
    """The repeats of one tool on one trace."""

    runs: tuple[Run, ...]

    @property
    def failure(self) -> str | None:
        return next((r.failure for r in self.runs if r.failure is not None), None)

    @property
    def wall_s(self) -> float | None:
        if not self.runs or self.failure is not None:
            return None
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def peak_rss_mib(self) -> float | None:
        rss = [r.peak_rss_kib for r in self.runs if r.peak_rss_kib is not None]
        if not rss or self.failure is not None:
            return None
        return max(rss) / 1024


def measure(command: list[str], cwd: Path, timeout_s: float) -> tuple[Run, str]:
    """Run `command` under GNU time; the Run, and its stdout (for the caller to read)."""
    with tempfile.TemporaryDirectory(prefix="trace_vs_hta-run-") as scratch:
        time_file = Path(scratch) / "time.txt"
        start = time.perf_counter()
        done = run_in_own_group(
            [GNU_TIME, "-o", str(time_file), "-f", "%M", *command], cwd, timeout_s
        )
        if done is None:
            return Run(timeout_s, None, f"timed out after {timeout_s:g} s"), ""
        returncode, stdout, stderr = done
        wall_s = time.perf_counter() - start
        # GNU time writes "Command exited with non-zero status N" before the figure.
        time_text = time_file.read_text() if time_file.exists() else ""
        figures = [line for line in time_text.split() if line.isdigit()]
        rss_kib = int(figures[-1]) if figures else None
    failure = None
    if returncode != 0:
        failure = f"exit {returncode}: {last_line(stderr or stdout)}"
    return Run(wall_s, rss_kib, failure), stdout


def run_hta(hta_python: Path, trace_dir: Path, include_last_step: bool, timeout_s: float) -> Run:
    last_step = "1" if include_last_step else "0"
    command = [str(hta_python), "-c", HTA_PROGRAM, str(trace_dir), last_step]
    run, stdout = measure(command, trace_dir.parent, timeout_s)
    if run.failure is not None:
        return run
    try:
        detail = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return Run(run.wall_s, run.peak_rss_kib, f"no result line: {last_line(stdout)}")
    return Run(run.wall_s, run.peak_rss_kib, None, detail)


def run_lightspeed(lightspeed: Path, trace: Path, out_json: Path, timeout_s: float) -> Run:
    out_json.unlink(missing_ok=True)
    command = [str(lightspeed), "trace", str(trace), "--json", str(out_json)]
    run, _ = measure(command, trace.parent.parent, timeout_s)
    if run.failure is None and not out_json.exists():
        return Run(run.wall_s, run.peak_rss_kib, f"exit 0 but wrote no {out_json.name}")
    return run


def default_traces(directory: Path, count: int) -> list[Path]:
    files = [p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)]
    return sorted(files, key=lambda p: p.stat().st_size, reverse=True)[:count]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def python_version(python: Path) -> str:
    if not python.exists():
        return "not found"
    done = subprocess.run(
        [str(python), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or last_line(done.stderr)


def hta_version(hta_python: Path) -> str:
    if not hta_python.exists():
        return "not found"
    code = "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"
    done = subprocess.run([str(hta_python), "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or last_line(done.stderr)


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def print_table(results: list[tuple[Path, Summary | None, Summary | None]]) -> None:
    header = (
        f"{'trace':<46}{'gz MiB':>7}{'HTA s':>8}{'HTA MiB':>9}"
        f"{'LS s':>8}{'LS MiB':>8}{'speed-up':>10}{'per round':>10}{'mem ratio':>11}"
    )
    print(header)
    print("-" * len(header))
    for trace, hta, ls in results:
        hta_s, hta_mib = (hta.wall_s, hta.peak_rss_mib) if hta else (None, None)
        ls_s, ls_mib = (ls.wall_s, ls.peak_rss_mib) if ls else (None, None)
        rounds = round_ratios(hta, ls)
        per_round = statistics.median(rounds) if rounds else None
        print(
            f"{trace.name[:45]:<46}{trace.stat().st_size / 2**20:>7.1f}"
            f"{fmt(hta_s, '.2f'):>8}{fmt(hta_mib, '.0f'):>9}"
            f"{fmt(ls_s, '.2f'):>8}{fmt(ls_mib, '.0f'):>8}"
            f"{fmt(ratio(hta_s, ls_s), '.1f'):>10}{fmt(per_round, '.1f'):>10}"
            f"{fmt(ratio(hta_mib, ls_mib), '.1f'):>11}"
        )


def print_notes(results: list[tuple[Path, Summary | None, Summary | None]]) -> None:
    print(
        "speed-up = HTA median wall / lightspeed (LS) median wall; per round = the median of"
        " HTA wall / LS wall within each round; mem ratio = HTA / LS peak RSS\n"
    )
    for trace, hta, ls in results:
        for tool, summary in (("HTA", hta), ("lightspeed", ls)):
            if summary is None:
                continue
            if summary.failure is not None:
                print(f"{trace.name}: {tool} failed: {summary.failure}")
            else:
                walls = " ".join(f"{r.wall_s:.2f}" for r in summary.runs)
                print(f"{trace.name}: {tool} wall per repeat (s): {walls}")
        if hta is None or hta.failure is not None or not hta.runs:
            continue
        detail = hta.runs[0].detail
        phases = ", ".join(
            f"{name} {r['seconds']:.2f} s" if r["ok"] else f"{name} FAILED ({r['error']})"
            for name, r in detail["analyses"].items()
        )
        print(
            f"{trace.name}: HTA rank(s) {detail['ranks']}, rows kept {detail['rows']}; "
            f"first run: import {detail['import_s']:.2f} s, load {detail['load_s']:.2f} s, "
            f"{phases}"
        )


def bench_trace(trace: Path, args: argparse.Namespace) -> tuple[Summary | None, Summary | None]:
    """The HTA and lightspeed repeats on a private copy of `trace` (None: tool not selected)."""
    with tempfile.TemporaryDirectory(prefix="trace_vs_hta-") as tmp:
        # The trace directory holds only the trace: HTA would read lightspeed's JSON output
        # as another rank's trace if it were written there.
        trace_dir = Path(tmp) / "trace"
        trace_dir.mkdir()
        copy = trace_dir / trace.name
        shutil.copyfile(trace, copy)
        out_json = Path(tmp) / "lightspeed.json"
        hta_runs: list[Run] = []
        ls_runs: list[Run] = []
        # The tools take turns, round after round, so that a machine whose speed drifts
        # between minutes slows both alike; the ratio is taken within each round. A first
        # round is not counted: it writes each tool's bytecode where none is yet (as
        # installing with pip does) and reads the trace into the page cache for both.
        for repeat in range(args.repeats + 1):
            if repeat == 1:
                hta_runs.clear()
                ls_runs.clear()
            if "hta" in args.tools:
                hta_runs.append(
                    run_hta(args.hta_python, trace_dir, args.hta_include_last_step, args.timeout)
                )
            if "lightspeed" in args.tools:
                ls_runs.append(run_lightspeed(args.lightspeed, copy, out_json, args.timeout))
        hta = Summary(tuple(hta_runs)) if "hta" in args.tools else None
        ls = Summary(tuple(ls_runs)) if "lightspeed" in args.tools else None
        return hta, ls


def round_ratios(hta: Summary | None, ls: Summary | None) -> list[float]:
    """HTA's wall time over lightspeed's, round by round (both measured in each)."""
    if hta is None or ls is None or hta.failure is not None or ls.failure is not None:
        return []
    return [h.wall_s / s.wall_s for h, s in zip(hta.runs, ls.runs, strict=True) if s.wall_s > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, help="trace files (.json or .json.gz)")
    parser.add_argument(
        "--traces-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces"
    )
    parser.add_argument("--largest", type=int, default=3, help="traces taken when none given")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per tool")
    parser.add_argument("--hta-python", type=Path, default=REPO / ".bench-venv" / "bin" / "python")
    parser.add_argument("--lightspeed", type=Path, default=REPO / ".venv" / "bin" / "lightspeed")
    parser.add_argument(
        "--tools", nargs="+", choices=("hta", "lightspeed"), default=["hta", "lightspeed"]
    )
    parser.add_argument(
        "--hta-include-last-step",
        action="store_true",
        help="keep the last ProfilerStep, which HTA drops by default",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not Path(GNU_TIME).exists():
        parser.error(f"{GNU_TIME} (GNU time) is needed to measure peak RSS: apt-get install time")
    # A user's installed packages hold their bytecode; an environment that forbids
    # writing it (PYTHONDONTWRITEBYTECODE) would make a tool installed without it, as
    # `make` installs lightspeed, compile every module it imports on every run (0.5 s of
    # lightspeed's 1.3 s on the largest shared trace).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    traces = args.traces or default_traces(args.traces_dir, args.largest)
    if not traces:
        parser.error(f"no trace files given and none found in {args.traces_dir}")

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()}")
    print(
        f"Python: bench {platform.python_version()}, "
        f"HTA env {python_version(args.hta_python)}, "
        f"lightspeed env {python_version(args.lightspeed.with_name('python'))}"
    )
    print(f"HTA: {hta_version(args.hta_python)} ({args.hta_python})")
    print(f"repeats: {args.repeats}; wall = median, peak RSS = max over repeats\n")

    results: list[tuple[Path, Summary | None, Summary | None]] = []
    for trace in traces:
        hta, ls = bench_trace(trace, args)
        results.append((trace, hta, ls))
        print(f"measured {trace.name}", flush=True)
    print()
    print_table(results)
    print()
    print_notes(results)


if __name__ == "__main__":
    main()
