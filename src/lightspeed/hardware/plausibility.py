"""Is a calibration believable? A busy machine measures low ceilings, and low ceilings
make every later profile read above the speed of light, so a calibration that
contradicts itself or falls far below an earlier one of the same machine is rejected
instead of cached.
"""

from __future__ import annotations

from lightspeed.facts.hardware import Hardware
from lightspeed.facts.timing import speed_change
from lightspeed.units import byte_rate, flops_rate

# A canary kernel that ran this much faster or slower after the calibration than before
# says the machine's speed changed by more than the ceilings can be trusted to.
CANARY_CHANGE = 0.5
# A peak or a bandwidth below this fraction of the same machine's earlier calibration
# is a busy machine, not a slower one: a shared guest drifts by up to 1.5×, never 2×
# in the quiet minutes a calibration needs.
DROP_FRACTION = 0.5


def problems(hw: Hardware, previous: Hardware | None = None) -> list[str]:
    """Why `hw`'s measured ceilings cannot be right, each as a phrase; none if plausible.

    `previous` is the calibration of the same device, threads and torch version that
    `hw` would replace, if any.
    """
    found = []
    cache = hw.cache_bandwidth_bytes_per_s
    if cache is not None and cache < hw.memory_bandwidth_bytes_per_s:
        found.append(
            f"its cache bandwidth ({byte_rate(cache)}) is below its memory"
            f" bandwidth ({byte_rate(hw.memory_bandwidth_bytes_per_s)})"
        )
    cal = hw.calibration
    if cal is not None and cal.canary_flops_per_s and cal.canary_before_flops_per_s:
        ratio = cal.canary_flops_per_s / cal.canary_before_flops_per_s
        if abs(ratio - 1) > CANARY_CHANGE:
            found.append(
                f"the machine's speed changed while it measured (a canary kernel ran"
                f" {speed_change(ratio)} after than before)"
            )
    if previous is None:
        return found
    for precision, peak in hw.peak_flops_per_s.items():
        before = previous.peak_flops_per_s.get(precision)
        if before is not None and peak < DROP_FRACTION * before:
            found.append(
                f"its {precision.value} peak ({flops_rate(peak)}) is below half"
                f" the {flops_rate(before)} measured before"
            )
    before_bw = previous.memory_bandwidth_bytes_per_s
    if hw.memory_bandwidth_bytes_per_s < DROP_FRACTION * before_bw:
        found.append(
            f"its memory bandwidth ({byte_rate(hw.memory_bandwidth_bytes_per_s)}) is"
            f" below half the {byte_rate(before_bw)} measured before"
        )
    return found
