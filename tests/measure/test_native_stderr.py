"""Kineto's lines on file descriptor 2 kept out of what the Python API prints."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lightspeed.measure.native_stderr import profiler_chatter_dropped

# Two lines as Kineto writes them each time a profiler starts and stops.
CHATTER = (
    b"USDT:2026-11-26 22:45:50 7140:7140 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
    b"USDT:2026-11-26 22:45:50 7140:7140 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"
)


def test_chatter_is_dropped_and_the_rest_kept_in_order(capfd: pytest.CaptureFixture[str]) -> None:
    with profiler_chatter_dropped():
        os.write(2, b"first\n" + CHATTER + b"last\n")
        print("from python", file=sys.stderr)
    _, err = capfd.readouterr()
    # (capfd takes Python's writes without fd 2: only the native ones' order is checked)
    assert err.replace("from python\n", "") == "first\nlast\n" and "from python\n" in err


def test_stderr_is_restored_on_an_exception(capfd: pytest.CaptureFixture[str]) -> None:
    before = os.fstat(2)
    with pytest.raises(KeyError), profiler_chatter_dropped():
        os.write(2, CHATTER + b"why it failed\n")
        raise KeyError("x")
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    os.write(2, b"later\n")
    assert capfd.readouterr().err == "why it failed\nlater\n"


def test_the_api_leaves_no_profiler_lines_on_stderr() -> None:
    """The profiled steps of `lightspeed.profile` (`profile_op_times`, its one use of the
    profiler) and `lightspeed.observe`, in a fresh process: Kineto reads its log level
    once, when the first profiler starts, so only a process of its own shows what it
    prints (without the CLI's KINETO_LOG_LEVEL)."""
    code = (
        "import os, torch, lightspeed\n"
        "from lightspeed import suite\n"
        "from lightspeed.measure.op_times import profile_op_times\n"
        "from lightspeed.measure.step import StepSettings, prepare\n"
        "profile_op_times(prepare(suite.get('mlp-tiny'), StepSettings()), ['aten::mm'])\n"
        "with lightspeed.observe(wait=0, warmup=1, active=1) as obs:\n"
        "    for _ in obs.loop(range(2)):\n"
        "        torch.ones(8, 8) @ torch.ones(8, 8)\n"
        "os.write(2, b'done\\n')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "profiler_start" not in done.stderr and "USDT" not in done.stderr, done.stderr
    assert done.stderr.endswith("done\n")
