"""Shape-only profiles of Hugging Face architectures at their default sizes: the time and
peak memory of `lightspeed profile hf:MODEL --shape-only --dtype D`, each in its own
process (its peak resident memory is the process's own).

    PYTHONPATH=src .venv/bin/python benchmarks/hf_shape_only.py

Each must finish under 60 s and 2 GB however large the model: nothing is allocated (a
7-billion-parameter Llama would need about 100 GiB to train for real).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("bert", "gpt2", "t5", "llama", "mistral")
DTYPES = ("fp32", "bf16", "fp16")
LIMIT_S, LIMIT_BYTES = 60.0, 2 * 10**9


def run(model: str, dtype: str) -> dict[str, object]:
    """One shape-only profile in a child process: seconds, peak bytes, FLOPs, exit code."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "profile.json", Path(tmp) / "stderr"
        command = [sys.executable, "-m", "lightspeed", "profile", f"hf:{model}"]
        command += ["--shape-only", "--dtype", dtype, "--json", str(out)]
        started = time.perf_counter()
        with err.open("w") as stderr:
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
            # wait4 gives this child's own resource use: its peak resident set, in KiB.
            _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        child.returncode = code
        lines = err.read_text().strip().splitlines()
        return {
            "model": model,
            "dtype": dtype,
            "exit": code,
            "seconds": seconds,
            "peak_bytes": usage.ru_maxrss * 1024,
            "flops": json.loads(out.read_text())["totals"]["flops"] if code == 0 else None,
            "error": lines[-1] if code and lines else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for model in args.models.split(","):
        for dtype in args.dtypes.split(","):
            row = run(model, dtype)
            rows.append(row)
            fits = row["exit"] == 0 and row["seconds"] < LIMIT_S  # type: ignore[operator]
            print(
                f"{model:8} {dtype:5} exit {row['exit']}  {row['seconds']:6.1f} s"
                f"  peak {int(row['peak_bytes']) / 1e9:5.2f} GB"  # type: ignore[call-overload]
                f"  {'ok' if fits else 'OVER ' + str(row['error'])}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
