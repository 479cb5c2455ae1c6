"""Which Hardware a run is modelled on: `--hardware ID|local`, or the default for a device."""

from __future__ import annotations

import dataclasses
import logging

import torch

from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.hardware.cache import load_calibration, save_calibration
from lightspeed.hardware.calibrate import calibrate
from lightspeed.hardware.catalog import catalog_hardware, catalog_id_for_device_name
from lightspeed.measure.device import device_name, require

log = logging.getLogger(__name__)

LOCAL = "local"


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
    hw_id = catalog_id_for_device_name(torch.cuda.get_device_name())
    if hw_id is None:
        return None
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return dataclasses.replace(catalog_hardware(hw_id), memory_bytes=int(total))


def local_hardware(device: Device, *, recalibrate: bool = False) -> Hardware:
    """The calibrated local `device`: from the cache, or measured now and cached."""
    require(device)  # before anything asks the device for its name
    if not recalibrate:
        cached = load_calibration(device)
        if cached is not None:
            return cached
    log.warning(
        "calibrating %s (%s): measuring matmul and memory ceilings once; the result is cached",
        device.value,
        device_name(device),
    )
    hw = calibrate(device)
    save_calibration(device, hw)
    return hw
