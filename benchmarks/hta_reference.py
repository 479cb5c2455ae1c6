"""HolisticTraceAnalysis (HTA) reference figures for Kineto trace files, to compare
lightspeed's figures with.

For each trace file, the file is copied alone into its own temporary directory (HTA reads
every *.json / *.gz file of a directory as a rank's trace), and for both settings of HTA's
`include_last_profiler_step` (False, HTA's default, then True) a fresh process of the HTA
environment's Python runs

- `TraceAnalysis(trace_dir=..., include_last_profiler_step=...)`;
- `get_temporal_breakdown(visualize=False)`: per rank, idle, compute, non-compute and
  kernel time (us) and the idle / compute / non-compute percentages;
- `get_idle_time_breakdown(ranks=<every rank>, visualize=False, visualize_pctg=False)`: per
  rank and stream, the idle time (us) of each idle category (HTA 0.5 returns a tuple of
  DataFrames; the first one, the absolute times, is kept);
- `get_gpu_kernel_breakdown(visualize=False)`: the time (us) and percentage of each kernel
  type (HTA 0.5 returns a tuple of DataFrames; the first one, by kernel type, is kept).

An analysis that raises is recorded as an error string, and the others still run; a load
that raises, or a run that times out, leaves every analysis of that setting empty. HTA's
warnings (such as "only one iteration", "ProfilerStep not found", or the rounding of
float timestamps to whole microseconds) are recorded too, without its timing messages.

The output is one JSON file:

    {"hta_version": ..., "pandas_version": ..., "python_version": ...,
     "traces": {"<file name>": {"include_last_profiler_step=False": {
         "ranks": [...], "temporal": [{...}, ...], "idle": [...], "kernel_types": [...],
         "warnings": [...], "errors": {"<analysis>": "<error>"}, "wall_s": ...},
       "include_last_profiler_step=True": {...}}}}

with one dict per DataFrame row, numbers as plain JSON numbers (NaN as null).

HTA environment, once (HTA 0.5 does not need torch):

    python3 -m venv .bench-venv
    .bench-venv/bin/pip install "HolisticTraceAnalysis>=0.5,<0.6"

Run, from the repository root:

    .venv/bin/python benchmarks/hta_reference.py [TRACE ...]
        [--out benchmarks/data/hta_reference.json] [--hta-python .bench-venv/bin/python]
        [--timeout 300]

Without TRACE arguments it takes every *.json.gz file in ../shared/traces (beside the
repository; `--traces-dir` changes it). Traces run one at a time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from processes import last_line, run_in_own_group

REPO = Path(__file__).resolve().parents[1]
SETTINGS = (False, True)

# Run by the HTA environment's Python as
# `python -c HTA_PROGRAM TRACE_DIR INCLUDE_LAST_STEP OUT_JSON`. Writes one JSON object to
# OUT_JSON: the ranks HTA found, the rows of each analysis, HTA's warnings, and the error
# of each analysis that raised.
HTA_PROGRAM = r"""
import json, logging, math, sys, traceback

TIMING = ("Parsed ", "Overall parsing of ", "leaving ", "Parser Memory usage")
warnings = []

class Collect(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if not message.startswith(TIMING):
            warnings.append(f"{record.levelname}: {message}"[:500])

def plain(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value

def rows(df):
    return [{str(k): plain(v) for k, v in row.items()} for row in df.to_dict("records")]

def first(result):
    return result[0] if isinstance(result, tuple) else result

result = {"ranks": [], "temporal": [], "idle": [], "kernel_types": [], "errors": {}}
try:
    from hta.trace_analysis import TraceAnalysis
    logging.getLogger("hta").addHandler(Collect(level=logging.WARNING))
    analyzer = TraceAnalysis(
        trace_dir=sys.argv[1], include_last_profiler_step=sys.argv[2] == "1"
    )
    ranks = sorted(int(r) for r in analyzer.t.traces)
    result["ranks"] = ranks
    analyses = {
        "temporal": lambda: analyzer.get_temporal_breakdown(visualize=False),
        "idle": lambda: first(
            analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False, visualize_pctg=False)
        ),
        "kernel_types": lambda: first(analyzer.get_gpu_kernel_breakdown(visualize=False)),
    }
except Exception as exc:
    traceback.print_exc()
    result["errors"]["load"] = f"{type(exc).__name__}: {exc}"[:500]
    analyses = {}
for name, call in analyses.items():
    try:
        result[name] = rows(call())
    except Exception as exc:
        traceback.print_exc()
        result["errors"][name] = f"{type(exc).__name__}: {exc}"[:500]
result["warnings"] = warnings
with open(sys.argv[3], "w") as out:
    json.dump(result, out)
"""


def setting_key(include_last_step: bool) -> str:
    return f"include_last_profiler_step={include_last_step}"


def empty_result(error: str) -> dict[str, Any]:
    empty: dict[str, Any] = {"ranks": [], "temporal": [], "idle": [], "kernel_types": []}
    return empty | {"warnings": [], "errors": {"run": error}}


def run_hta(
    hta_python: Path, trace_dir: Path, include_last_step: bool, timeout_s: float
) -> dict[str, Any]:
    """HTA's figures on the one trace in `trace_dir`, from a fresh process."""
    out_json = trace_dir.parent / "result.json"
    out_json.unlink(missing_ok=True)
    last_step = "1" if include_last_step else "0"
    command = [str(hta_python), "-c", HTA_PROGRAM, str(trace_dir), last_step, str(out_json)]
    start = time.perf_counter()
    done = run_in_own_group(command, trace_dir.parent, timeout_s)
    if done is None:
        result = empty_result(f"timed out after {timeout_s:g} s")
        result["wall_s"] = timeout_s
        return result
    returncode, stdout, stderr = done
    wall_s = time.perf_counter() - start
    if out_json.exists():
        result = json.loads(out_json.read_text())
        if returncode != 0:
            result["errors"]["run"] = f"exit {returncode}: {last_line(stderr)}"
    else:
        result = empty_result(f"exit {returncode}: {last_line(stderr or stdout)}")
    result["wall_s"] = round(wall_s, 2)
    return result


def reference_for_trace(
    trace: Path, hta_python: Path, timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Both settings of `include_last_profiler_step` on a private copy of `trace`."""
    with tempfile.TemporaryDirectory(prefix="hta_reference-") as tmp:
        # The trace directory holds only the trace: HTA reads every file there as a rank.
        trace_dir = Path(tmp) / "trace"
        trace_dir.mkdir()
        shutil.copyfile(trace, trace_dir / trace.name)
        return {
            setting_key(last_step): run_hta(hta_python, trace_dir, last_step, timeout_s)
            for last_step in SETTINGS
        }


def environment_versions(hta_python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, platform; print(json.dumps({"
        "'hta_version': m.version('HolisticTraceAnalysis'), "
        "'pandas_version': m.version('pandas'), "
        "'python_version': platform.python_version()}))"
    )
    done = subprocess.run([str(hta_python), "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{hta_python} cannot report HTA's version: {last_line(done.stderr)}")
    versions: dict[str, str] = json.loads(done.stdout)
    return versions


def default_traces(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.json.gz") if p.is_file())


def pct(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    return "-" if value is None else f"{value:.2f}"


def summary_line(name: str, key: str, result: dict[str, Any]) -> str:
    """One line per trace and setting: the temporal percentages of the first rank."""
    temporal = result["temporal"]
    figures = "idle - compute - non-compute -"
    if temporal:
        row = temporal[0]
        figures = (
            f"idle {pct(row, 'idle_time_pctg')} compute {pct(row, 'compute_time_pctg')} "
            f"non-compute {pct(row, 'non_compute_time_pctg')}"
        )
    errors = "; ".join(f"{k}: {v}" for k, v in result["errors"].items())
    return f"{name} [{key}] {result['wall_s']:.1f} s: {figures}" + (
        f" ERRORS {errors}" if errors else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, help="trace files (.json or .json.gz)")
    parser.add_argument(
        "--traces-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces"
    )
    parser.add_argument("--out", type=Path, default=Path("hta_reference.json"))
    parser.add_argument("--hta-python", type=Path, default=REPO / ".bench-venv" / "bin" / "python")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per HTA run")
    args = parser.parse_args()
    if not args.hta_python.exists():
        parser.error(f"no HTA Python at {args.hta_python}: see this script's docstring")
    traces = args.traces or default_traces(args.traces_dir)
    if not traces:
        parser.error(f"no trace files given and none found in {args.traces_dir}")

    document: dict[str, Any] = environment_versions(args.hta_python) | {"traces": {}}
    print(f"HTA {document['hta_version']}, pandas {document['pandas_version']}", flush=True)
    start = time.perf_counter()
    for trace in traces:
        results = reference_for_trace(trace, args.hta_python, args.timeout)
        document["traces"][trace.name] = results
        for key, result in results.items():
            print(summary_line(trace.name, key, result), flush=True)
    document["total_wall_s"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{len(traces)} trace(s) in {document['total_wall_s']:.0f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
