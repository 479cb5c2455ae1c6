"""What a mixed-precision prediction assumes of the hardware's lower-precision math."""

from __future__ import annotations

from lightspeed import units
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware


def precision_assumptions(hardware: Hardware, dtype: str, *, timed: bool) -> tuple[str, ...]:
    """The assumptions of predicting an fp32 step under `dtype` autocast on `hardware`:
    which ops change, and whether `dtype` math is faster or slower there than fp32's
    (on a CPU without native bf16 it is far slower, and the prediction says so).
    `timed`: the changed kernels were timed one by one on the device."""
    precision = Precision.parse(dtype)
    lower = hardware.peak_flops_per_s.get(precision)
    if lower is None:
        known = ", ".join(p.value for p in hardware.peak_flops_per_s)
        raise ConfigError(
            f"--dtype {dtype}: {hardware.id} has no {dtype} peak to predict with (it has"
            f" {known}); calibrate it with `lightspeed hw calibrate` or pick another dtype."
        )
    ratio = lower / hardware.peak(Precision.FP32)
    faster = "faster" if ratio > 1 else "slower"
    how = (
        "each changed op's time scales by its kernel's time in the two precisions, timed one"
        " by one on this device (the kernel's own speed, which layouts change tenfold)"
        if timed
        else "each changed op keeps its measured fraction of the speed of light"
    )
    return (
        "the ops autocast changes, and the casts it adds, are PyTorch's own: the step was"
        " run under torch.autocast on fake tensors",
        f"{dtype} matrix products peak at {units.flops_rate(lower)} on {hardware.id},"
        f" {ratio:.2g}× fp32's ({faster}); {how}",
    )
