"""Which Hardware a run is modelled on: `--hardware ID|local`, or the default for a device.

The calibration cache policy lives here, in `local_hardware`: a cached calibration (keyed
by device, CPU flags, thread count and torch version; see `cache`) is re-validated by a
canary kernel before use and measured again when the machine now runs faster than it
did then; a new calibration that `plausibility` rejects is measured once more, and if
still rejected never cached.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import torch

from lightspeed import progress
from lightspeed.errors import CalibrationError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.timing import CANARY_DRIFT_FRACTION, NoiseCheck
from lightspeed.hardware.cache import load_calibration, save_calibration
from lightspeed.hardware.calibrate import calibrate
from lightspeed.hardware.catalog import catalog_hardware, catalog_id_for_device
from lightspeed.hardware.plausibility import problems
from lightspeed.measure.device import device_name, require
from lightspeed.measure.noise import canary_kernel, canary_rate, quiet_check
from lightspeed.units import flops_rate

log = logging.getLogger(__name__)
# What a command is doing while the user waits: printed, not a warning on its result.
progress_log = logging.getLogger("lightspeed.progress")

LOCAL = "local"
# The canary may read this much faster than it did at calibration before the cached
# ceilings count as measured on a busy machine: the same drift the noise check allows
# a canary between before and after a measurement.
CANARY_TOLERANCE = CANARY_DRIFT_FRACTION
# Before calibrating, wait at most this long for a busy machine to quiet down (right
# after a package install or a build, a 2-core guest is busy for tens of seconds), in
# checks of QUIET_CHECK_S each.
QUIET_WAIT_S = 30.0
QUIET_CHECK_S = 1.0


def resolve_hardware(spec: str | None, device: Device) -> Hardware:
    """The Hardware for `--hardware spec` when running on `device`.

    `spec` is a catalog id, `local` (the calibrated local device), or None: the
    catalog entry of the local GPU when it has one, else `local`.
    """
    if spec is not None and spec != LOCAL:
        return catalog_hardware(spec)
    if spec is None and device is Device.CUDA:
        mapped = local_catalog_gpu()
        if mapped is not None:
            return mapped
    return local_hardware(device)


def local_catalog_gpu() -> Hardware | None:
    """The catalog entry of the local CUDA GPU, with its real memory size, if catalogued."""
    require(Device.CUDA)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    total = int(props.total_memory)
    hw_id = catalog_id_for_device(props.name, props.multi_processor_count, total)
    if hw_id is None:
        return None
    return dataclasses.replace(catalog_hardware(hw_id), memory_bytes=total)


def local_hardware(device: Device, *, recalibrate: bool = False, force: bool = False) -> Hardware:
    """The calibrated local `device`: from the cache when its canary still agrees, else
    measured now and cached if plausible.

    `recalibrate` measures even when a cached calibration is fine; `force` caches a new
    calibration that `plausibility` rejects.
    """
    require(device)  # before anything asks the device for its name
    cached = load_calibration(device)
    if cached is not None and not recalibrate:
        if still_valid(device, cached):
            return cached
    else:
        progress_log.warning(
            "calibrating %s (%s): measuring matmul and memory ceilings once; the result is cached",
            device.value,
            device_name(device),
        )
    with progress.stage(f"calibrating the {device.value}"):
        wait_until_quiet(device)
        return _calibrate_checked(device, cached, force=force)


def wait_until_quiet(
    device: Device,
    max_wait_s: float | None = None,
    *,
    check: Callable[[Device], NoiseCheck] = lambda d: quiet_check(d, QUIET_CHECK_S),
    clock: Callable[[], float] = time.monotonic,
) -> NoiseCheck:
    """Run noise checks on `device` until one finds the machine quiet or `max_wait_s`
    seconds (default QUIET_WAIT_S) have passed; the last check. Ceilings measured on a
    busy machine are low, and every profile against them then reads above its speed of
    light."""
    if max_wait_s is None:
        max_wait_s = QUIET_WAIT_S
    deadline = clock() + max_wait_s
    noise = check(device)
    if noise.warnings:
        # A note on what it is doing; why the machine looked busy is said once, in the
        # warning below if it stays busy.
        progress_log.warning(
            "the machine is busy; waiting up to %.0f s for it to quiet down before calibrating",
            max_wait_s,
        )
    with progress.stage("waiting for the machine to quiet down"):
        while noise.warnings and clock() < deadline:
            noise = check(device)
    if noise.warnings:
        log.warning(
            "calibrating although the machine is still busy after %.0f s (%s): the ceilings"
            " may be low; run `lightspeed hw calibrate` when it is quiet",
            max_wait_s,
            "; ".join(noise.warnings),
        )
    return noise


def still_valid(device: Device, cached: Hardware) -> bool:
    """Whether `cached` still describes the machine: its canary kernel, timed now, runs
    no more than `CANARY_TOLERANCE` faster than it did right after calibrating.

    Faster now means the calibration ran on a busy machine and its ceilings are low.
    Slower now means the machine is busy now: the cached ceilings stay, with a warning.
    A calibration that recorded no canary (an older or hand-made one) is kept as it is.
    """
    cal = cached.calibration
    if cal is None or cal.canary_flops_per_s is None or cal.canary_kernel != canary_kernel(device):
        return True
    now = canary_rate(device)
    ratio = now / cal.canary_flops_per_s
    if ratio > 1 + CANARY_TOLERANCE:
        log.warning(
            "the cached calibration of %s (%s) is slower than this machine is now: its canary"
            " (%s) runs at %s against %s then; calibrating again",
            device.value,
            cal.measured_at,
            cal.canary_kernel,
            flops_rate(now),
            flops_rate(cal.canary_flops_per_s),
        )
        return False
    if ratio < 1 / (1 + CANARY_TOLERANCE):
        log.warning(
            "this machine is busy: a canary kernel runs at %.0f%% of its rate when %s was"
            " calibrated; timings will be slower than the machine can run",
            100 * ratio,
            device.value,
        )
    return True


def _calibrate_checked(device: Device, previous: Hardware | None, *, force: bool) -> Hardware:
    hw = calibrate(device)
    found = problems(hw, previous)
    if found and not force:
        log.warning(
            "the calibration is implausible (%s): the machine was probably busy; measuring"
            " once more",
            "; ".join(found),
        )
        wait_until_quiet(device)
        hw = calibrate(device)
        found = problems(hw, previous)
    if found and not force:
        reason = "; ".join(found)
        if previous is not None:
            log.warning(
                "calibration rejected, not cached: %s. Keeping the calibration of %s; run"
                " `lightspeed hw calibrate` when the machine is quiet (or with --force to"
                " keep the new figures).",
                reason,
                previous.calibration.measured_at if previous.calibration else "before",
            )
            return previous
        raise CalibrationError(
            f"calibration rejected, not cached: {reason}. The machine was busy while it"
            " measured; run `lightspeed hw calibrate` when it is quiet, pass --force to keep"
            " these figures, or model a catalog device with --hardware."
        )
    save_calibration(device, hw)
    return hw
