"""Running a benchmark's measured program in a process of its own, with a time limit."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def run_in_own_group(
    command: list[str], cwd: Path, timeout_s: float
) -> tuple[int, str, str] | None:
    """(exit status, stdout, stderr) of `command` run in `cwd`, or None when it ran past
    `timeout_s`. It runs in its own process group, so that a timeout ends every process
    it started (a measured program under GNU time, an analysis's workers), not only the
    first."""
    with subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None
    return process.returncode, stdout, stderr


def last_line(text: str) -> str:
    """The last non-blank line of a program's output, for a one-line failure."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"
