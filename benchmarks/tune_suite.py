"""`lightspeed tune` over the suite's tiny workloads: each candidate's predicted against
measured step time, and what was kept.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_suite.py

Every tiny suite workload is tuned with every candidate (`lightspeed.workflows.tune.tune`, no
memory budget, 0.5 s of timing a profile, 1 thread). For each candidate that ran and has
a prediction, the error is predicted / measured − 1 of its step time; the median and the
worst |error| over all of them close the table. Candidates that were skipped, or whose
check failed, are listed with why.
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

from lightspeed.errors import LightspeedError
from lightspeed.suite import get, names
from lightspeed.workflows.tune import tune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing a profile")
    parser.add_argument("--only", nargs="*", help="these workloads only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    workloads = args.only or [n for n in names() if n.endswith("-tiny")]
    errors: list[float] = []
    print(f"{platform.processor() or platform.machine()}, 1 thread")
    header = f"{'workload':26s}{'candidate':12s}{'predicted':>11s}{'measured':>11s}"
    print(f"{header}{'error':>9s}  outcome")
    for name in workloads:
        try:
            tuning = tune(get(name), budget_s=args.budget)
        except LightspeedError as exc:
            print(f"{name:26s}failed: {exc}")
            continue
        for c in tuning.candidates:
            if c.predicted_step_s and c.measured_step_s:
                error = c.predicted_step_s / c.measured_step_s - 1
                errors.append(abs(error))
                figures = (
                    f"{c.predicted_step_s * 1e3:>9.2f}ms{c.measured_step_s * 1e3:>9.2f}ms"
                    f"{error:>+9.1%}"
                )
            else:
                figures = f"{'':>31s}"
            why = f" ({c.reason})" if c.reason else ""
            print(f"{name:26s}{c.name:12s}{figures}  {c.verdict.value}{why}"[:200], flush=True)
    if errors:
        print(
            f"\n{len(errors)} predictions: median |error| {statistics.median(errors):.1%},"
            f" worst {max(errors):.1%}"
        )


if __name__ == "__main__":
    main()
