"""Run a worker module in N processes under torchrun (`torch.distributed.run`) and read
back the JSON its rank 0 writes.

A worker is started as `python -m torch.distributed.run --standalone --nproc-per-node N
-m MODULE ARGS… --out PATH`. Rank 0 writes its result to PATH; a worker that fails on
purpose (a `LightspeedError`, the workload raising) writes its one-line message to
`PATH.rank<R>.error` first, so the parent can say what went wrong in one line rather
than torchrun's report of a child's exit.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightspeed.errors import ConfigError, DeviceError, LightspeedError, WorkloadError

logger = logging.getLogger(__name__)

# The most torchrun's own start-up and the workers' imports take on a slow machine, in
# seconds; a run's timeout adds its own work to it.
START_S = 120.0


def default_threads(processes: int) -> int:
    """Threads per process when --threads is not given: the cores shared evenly."""
    return max(1, (os.cpu_count() or 1) // processes)


def error_path(out: Path, rank: int) -> Path:
    """Where rank `rank` writes its one-line error message."""
    return out.with_name(f"{out.name}.rank{rank}.error")


def run_workers(
    module: str,
    args: Sequence[str],
    nproc: int,
    *,
    threads: int,
    timeout_s: float,
) -> dict[str, Any]:
    """Run `module` in `nproc` processes of `threads` threads each under torchrun, for
    at most `timeout_s` seconds of their own work, and return what rank 0 wrote."""
    if nproc < 1:
        raise ConfigError(f"--nproc {nproc} must be at least 1.")
    if importlib.util.find_spec("torch.distributed.run") is None:
        raise DeviceError(
            "--nproc needs torch.distributed.run (torchrun), which this PyTorch lacks;"
            " install a build of torch with distributed support."
        )
    with tempfile.TemporaryDirectory(prefix="lightspeed-torchrun-") as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            "-m",
            module,
            *args,
            "--out",
            str(out),
        ]
        # torchrun would set OMP_NUM_THREADS=1 itself, with a warning, when it is unset.
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=env, timeout=START_S + timeout_s
            )
        except subprocess.TimeoutExpired:
            raise LightspeedError(
                f"the {nproc} processes under torchrun did not finish in"
                f" {START_S + timeout_s:.0f} s; a process may be stuck in a collective."
            ) from None
        logger.debug("torchrun's output:\n%s", done.stderr)
        for rank in range(nproc):
            failed = error_path(out, rank)
            if failed.exists():
                raise WorkloadError(failed.read_text().strip())
        # A process may abort while the process group is torn down, after rank 0 wrote its
        # result ("terminate called without an active exception" from a thread of the
        # gloo backend): the result stands.
        if not out.exists():
            raise LightspeedError(
                f"torchrun exited with status {done.returncode}: {_last_error(done.stderr)}"
                " (rerun with --debug for the traceback)"
            )
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def _last_error(stderr: str) -> str:
    """The last error a worker printed (torchrun prefixes its lines `[rankN]:`), else
    the last line naming an error, else the last line."""
    lines = [s.strip() for s in stderr.splitlines() if s.strip()]
    for wanted in (
        lambda t: t.startswith("[rank") and "Error" in t,
        lambda t: ("Error" in t or "error:" in t) and "ChildFailedError" not in t,
    ):
        for text in reversed(lines):
            if wanted(text):
                return text
    return lines[-1] if lines else "no output"
