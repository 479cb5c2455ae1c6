"""Hardware as data: the `Hardware` type, the cited catalog, and local calibration."""

from lightspeed.hardware.catalog import catalog_hardware, catalog_id_for_device_name, catalog_ids
from lightspeed.hardware.model import Calibration, DeviceKind, Hardware
from lightspeed.hardware.resolve import LOCAL, local_hardware, resolve_hardware

__all__ = [
    "LOCAL",
    "Calibration",
    "DeviceKind",
    "Hardware",
    "catalog_hardware",
    "catalog_id_for_device_name",
    "catalog_ids",
    "local_hardware",
    "resolve_hardware",
]
