"""Is the machine quiet? A canary kernel timed before and after a measurement, the CPU
time the hypervisor stole in between, and the load average.

The load average alone cannot tell: it counts this guest's runnable threads, not the
neighbouring guests that share its physical cores. Steal time (Linux `/proc/stat`) does
see them, and a canary whose rate moved between before and after sees any change at all.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import torch

from lightspeed.facts.device import Device
from lightspeed.facts.timing import NoiseCheck
from lightspeed.measure.device import require, synchronizer
from lightspeed.measure.timer import TimerConfig, measure

# The canary: an fp32 n×n×n matmul, big enough to keep every core busy, small enough
# to time many replicates in a few tens of milliseconds.
_CANARY_N = {Device.CPU: 256, Device.CUDA: 4096}
CANARY_BUDGET_S = 0.04
_PROC_STAT = Path("/proc/stat")


def canary_kernel(device: Device) -> str:
    """What the canary of `device` runs, as stored beside a calibration's canary rate."""
    n = _CANARY_N[device]
    return f"fp32 {n}×{n}×{n} matmul"


def canary_rate(device: Device, budget_s: float = CANARY_BUDGET_S) -> float:
    """FLOP/s of the canary kernel on `device`: 2·n³ over its fastest replicate."""
    torch_device = require(device)
    n = _CANARY_N[device]
    a = torch.randn(n, n, device=torch_device)
    b = torch.randn(n, n, device=torch_device)
    out = torch.empty(n, n, device=torch_device)
    m = measure(
        lambda: torch.mm(a, b, out=out),
        sync=synchronizer(device),
        config=TimerConfig(warmup_steps=1, budget_s=budget_s, min_replicates=3, max_settle_s=0),
    )
    return 2 * n**3 / m.min_s


def cpu_ticks() -> tuple[int, int] | None:
    """(stolen, total) CPU ticks since boot over all CPUs, or None where the OS does
    not report steal time."""
    try:
        first = _PROC_STAT.read_text("ascii").splitlines()[0].split()
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    if first[:1] != ["cpu"] or len(first) < 9:
        return None
    # user nice system idle iowait irq softirq steal: guest time is inside user already.
    ticks = [int(field) for field in first[1:9]]
    return ticks[7], sum(ticks)


def load_average() -> float | None:
    """The 1-minute load average of this machine, or None where the OS does not say."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy_load_average() -> float:
    """The load average above which other processes must be running on the cores torch
    uses: more runnable work than the cores it leaves free, plus one."""
    spare = max(0, (os.cpu_count() or 1) - torch.get_num_threads())
    return spare + 1.0


@dataclasses.dataclass
class NoiseProbe:
    """A noise check under way: `start` before measuring, `finish` after."""

    device: Device
    canary_before: float | None = None
    ticks_before: tuple[int, int] | None = None

    @classmethod
    def start(cls, device: Device) -> NoiseProbe:
        """Time the canary and read the CPU counters now."""
        return cls(device, canary_rate(device), cpu_ticks())

    def finish(self) -> NoiseCheck:
        """Time the canary again and say how the machine behaved since `start`."""
        ticks_after = cpu_ticks()
        steal_share = None
        if self.ticks_before is not None and ticks_after is not None:
            stolen = ticks_after[0] - self.ticks_before[0]
            total = ticks_after[1] - self.ticks_before[1]
            steal_share = stolen / total if total > 0 else None
        return NoiseCheck(
            canary_before_per_s=self.canary_before,
            canary_after_per_s=canary_rate(self.device),
            steal_share=steal_share,
            load_average=load_average(),
            cpu_count=os.cpu_count(),
        )


def quiet_check(device: Device, window_s: float = 1.0) -> NoiseCheck:
    """A noise check over `window_s` seconds of this process idling: does the machine
    run its canary at the same rate at both ends, with no time stolen meanwhile?"""
    probe = NoiseProbe.start(device)
    time.sleep(window_s)
    return probe.finish()
