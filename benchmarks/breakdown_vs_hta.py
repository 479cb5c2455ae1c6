"""lightspeed's whole-trace temporal breakdown against HolisticTraceAnalysis 0.5's.

Reads HTA's figures as `benchmarks/hta_reference.py` recorded them (default
`benchmarks/data/hta_reference.json`; `--reference` names another, e.g. the
pandas-2 run for traces HTA cannot load under pandas 3), analyses each trace with
lightspeed in both settings of the last step, and prints the idle, compute and
non-compute percentages of both and the largest difference, in points:

    .venv/bin/python benchmarks/breakdown_vs_hta.py [--traces ../shared/traces]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lightspeed import trace

REPO = Path(__file__).resolve().parents[1]


def shares(temporal: Any) -> tuple[float, float, float]:
    """(idle, compute, non-compute) in % of lightspeed's whole-trace device span."""
    total = temporal.total_s
    if not total:
        return (0.0, 0.0, 0.0)
    idle, compute = temporal.idle_s / total, temporal.compute_s / total
    return (100 * idle, 100 * compute, 100 * (1 - idle - compute))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    parser.add_argument(
        "--reference",
        type=Path,
        action="append",
        help="HTA figures (JSON); later files fill traces the earlier ones lack",
    )
    args = parser.parse_args()
    references = args.reference or [REPO / "benchmarks" / "data" / "hta_reference.json"]
    figures: dict[str, dict[str, Any]] = {}
    for path in references:
        for name, settings in json.loads(path.read_text())["traces"].items():
            for setting, result in settings.items():
                if result.get("temporal") or setting not in figures.get(name, {}):
                    figures.setdefault(name, {})[setting] = result
    print(f"{'trace':46} last  lightspeed idle/compute/other | HTA idle/compute/other | diff")
    worst = 0.0
    for name in sorted(figures):
        for last in (False, True):
            result = figures[name][f"include_last_profiler_step={last}"]
            if not result.get("temporal"):
                print(f"{name[:46]:46} {last!s:5} HTA failed: {', '.join(result['errors'])}")
                continue
            row = result["temporal"][0]
            hta = (row["idle_time_pctg"], row["compute_time_pctg"], row["non_compute_time_pctg"])
            analysis = trace.analyse([args.traces / name], include_last_step=last)
            mine = shares(analysis.ranks[0].whole.temporal)
            diff = max(abs(a - b) for a, b in zip(mine, hta, strict=True))
            if mine != (0.0, 0.0, 0.0):
                worst = max(worst, diff)
            print(
                f"{name[:46]:46} {last!s:5} {mine[0]:6.2f} {mine[1]:6.2f} {mine[2]:6.2f}"
                f" | {hta[0]:6.2f} {hta[1]:6.2f} {hta[2]:6.2f} | {diff:5.2f}"
            )
    print(f"largest difference where lightspeed reads device events: {worst:.2f} points")


if __name__ == "__main__":
    main()
