"""`profile`: the Python entry point that measures a training step into a `Profile`."""

from __future__ import annotations

from lightspeed.dtypes import StepDtype
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.hardware.resolve import resolve_hardware
from lightspeed.measure.profile_run import profile_workload
from lightspeed.measure.step import StepSettings
from lightspeed.measure.timer import TimerConfig
from lightspeed.workload import Workload
from lightspeed.workload.targets import load_target

__all__ = ["profile", "profile_shapes", "run_setup"]

# A profile's timer stops at 4 replicates once its budget is spent (`lightspeed time` at
# 5): a step of seconds then costs one step less, and 4 is the fewest that give a
# spread without a warning (`Measurement.warnings`).
PROFILE_MIN_REPLICATES = 4


def run_setup(
    workload: Workload | str,
    device: str | Device,
    dtype: str,
    batch_size: int | None,
    hardware: Hardware | str | None,
    allocates: bool = True,
) -> tuple[Workload, StepSettings, Hardware]:
    """The workload to run (at `batch_size` when given), where and in which precision it
    runs, and the Hardware it is placed on (see `profile` for what each may be).
    `allocates=False`: the step runs on fake tensors only (`load_target`)."""
    dev = device if isinstance(device, Device) else Device.parse(device)
    settings = StepSettings(device=dev, dtype=StepDtype.parse(dtype))
    wl = load_target(workload, allocates=allocates) if isinstance(workload, str) else workload
    if batch_size is not None:
        wl = wl.with_batch_size(batch_size)
    hw = hardware if isinstance(hardware, Hardware) else resolve_hardware(hardware, dev)
    return wl, settings, hw


def profile(
    workload: Workload | str,
    *,
    device: str | Device = Device.CPU,
    dtype: str = "fp32",
    hardware: Hardware | str | None = None,
    batch_size: int | None = None,
    steps: int | None = None,
    budget_s: float = 2.0,
) -> Profile:
    """Measure one training step of `workload` and place it on the roofline of `hardware`.

    `workload` is a Workload or what `lightspeed profile` takes (a suite name or
    "file.py:NAME"). `hardware` is a Hardware, a catalog id, "local" or None (the
    device the step runs on: calibrated on a CPU, the catalog entry of a GPU).
    `steps` profiled steps give each op's time (their median; None: 3, fewer for a
    step over 0.7 s, so they take about 2 s); `budget_s` seconds go to
    timing the uninstrumented step (at least `PROFILE_MIN_REPLICATES` replicates).
    `analyse(result)` derives the roofline report.

    Raises ProfileIncomplete (a LightspeedError carrying the partial Profile as
    `.partial`) when the workload raises or runs out of memory part-way.
    """
    if steps is not None and steps < 1:
        raise ConfigError(f"steps={steps} must be at least 1.")
    wl, settings, hw = run_setup(workload, device, dtype, batch_size, hardware)
    return profile_workload(
        wl,
        hw,
        settings,
        timer=TimerConfig(budget_s=budget_s, min_replicates=PROFILE_MIN_REPLICATES),
        profiled_steps=steps,
    )


def profile_shapes(
    workload: Workload | str,
    *,
    device: str | Device = Device.CPU,
    dtype: str = "fp32",
    hardware: Hardware | str | None = None,
    batch_size: int | None = None,
) -> Profile:
    """Analyse one training step of `workload` from shapes alone, on fake tensors
    (`measure.shape_only`): exact FLOPs, bytes and memory by category, with nothing
    allocated or executed, and every op timed at its speed of light on `hardware` (a
    lower bound on the step's time there; `predict.speed_of_light`). Arguments as for
    `profile`."""
    from lightspeed.measure.shape_only import profile_shape_only
    from lightspeed.predict.speed_of_light import at_speed_of_light

    wl, settings, hw = run_setup(workload, device, dtype, batch_size, hardware, allocates=False)
    return at_speed_of_light(profile_shape_only(wl, hw, settings))
