"""The rules that name what bounds a step, shared by trace diagnosis and the profile.

Each rule compares a share of the step's time with a threshold; each fix is bounded
by Amdahl's law: removing a part that takes a fraction f of the step can make the
step at most 1 / (1 − f) times faster.
"""

from __future__ import annotations

import enum


class StepBound(str, enum.Enum):
    """What limits a step."""

    GPU_COMPUTE = "gpu-compute"  # the device is busy: faster kernels are the lever
    MEMORY = "memory"  # the device is busy moving memory (copies, sets)
    CPU_LAUNCH_OVERHEAD = "cpu-launch-overhead"  # the host cannot issue work fast enough
    SYNCHRONIZATION = "synchronization"  # the host waits for the device, over and over
    DATA_LOADING = "data-loading"  # the step waits for its next batch
    COMMUNICATION = "communication"  # collectives that computation does not hide
    CPU_COMPUTE = "cpu-compute"  # a CPU-only step busy in real work
    UNKNOWN = "unknown"  # nothing to judge by


# Shares of the step above which each cause is named.
DATA_LOADING_SHARE = 0.25
SYNC_SHARE = 0.20
# A step that syncs this often (at least this many times, once per this many ops or
# fewer) never lets the host run ahead of the device, whatever each sync costs.
SYNC_MIN_COUNT = 10
SYNC_OPS_PER_SYNC = 8
EXPOSED_COMMUNICATION_SHARE = 0.25
DEVICE_IDLE_SHARE = 0.25
HOST_OVERHEAD_SHARE = 0.5
# Share of the step in 16-bit matrix products with shapes tensor cores cannot fully use.
TENSOR_CORE_SHAPES_SHARE = 0.05


def max_speedup(fraction: float) -> float:
    """The most a step can speed up when a part taking `fraction` of it disappears."""
    if fraction >= 1:
        return float("inf")
    return 1 / (1 - max(0.0, fraction))


def syncs_dominate(syncs: int, ops: int) -> bool:
    """Whether host syncs are frequent enough to serialize the step (see SYNC_MIN_COUNT)."""
    return syncs >= SYNC_MIN_COUNT and ops <= SYNC_OPS_PER_SYNC * syncs
