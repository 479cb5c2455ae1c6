"""Freed memory kept in the process while timing: a step that allocates and frees a
large buffer faults it in once, not every call. Each check runs in a process of its
own, since the setting lasts for the rest of a process."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="glibc's mallopt is the allocator setting under test",
)

# 64 MiB: above glibc's largest adaptive mmap threshold (32 MiB), so as glibc comes it
# is mapped and unmapped on every call, and every call faults its pages in again.
FAULTS_BEFORE_AND_AFTER = """
import json, torch
from lightspeed.measure.allocator import keep_freed_memory
from lightspeed.measure.timer import TimerConfig, measure

def fresh_buffer():
    torch.empty(16 * 2**20).fill_(1.0)

config = TimerConfig(warmup_steps=2, budget_s=0.2, min_replicates=3, max_settle_s=0)
before = measure(fresh_buffer, sync=lambda: None, config=config)
kept = keep_freed_memory()
# torch asks for 64-byte aligned blocks, which glibc serves from a little more than the
# block: a freed block fits the next request only once it has merged with a neighbour,
# which takes a few calls.
config = TimerConfig(warmup_steps=20, budget_s=0.2, min_replicates=3, max_settle_s=0)
after = measure(fresh_buffer, sync=lambda: None, config=config)
print(json.dumps([before.page_faults_per_call, kept, keep_freed_memory(),
                  after.page_faults_per_call]))
"""

TIME_WORKLOAD = """
import json, lightspeed
from lightspeed.measure.timer import TimerConfig
config = TimerConfig(warmup_steps=1, budget_s=0.05, min_replicates=2, max_settle_s=0)
w = lightspeed.load_target("mlp-tiny")
kept = lightspeed.time_workload(w, config=config).measurement.freed_memory_kept
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.measure.workload_timing import time_step
as_found = time_step(prepare(w, StepSettings()), config, keep_memory=False)
print(json.dumps([kept, as_found.measurement.freed_memory_kept]))
"""


def run_python(source: str) -> list[object]:
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=120, check=True
    )
    result: list[object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_freed_buffer_is_reused_instead_of_faulted_in_again() -> None:
    before, kept, again, after = run_python(FAULTS_BEFORE_AND_AFTER)
    assert kept is True and again is True
    assert isinstance(before, float) and isinstance(after, float)
    # 16,384 faults a call in 4 KiB pages, 32 in 2 MiB huge pages; kept, none.
    assert before >= 32
    assert after < before / 10


def test_the_step_timer_keeps_freed_memory_and_says_so() -> None:
    assert run_python(TIME_WORKLOAD) == [True, False]
