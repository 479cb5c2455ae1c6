"""Hardware as data: the cited catalog (`catalog.toml`, `catalog.py`) and, in modules of
their own that run kernels with torch, local calibration (`calibrate`, `bandwidth`,
`cache`) and `resolve.resolve_hardware` (a catalog id or the calibrated local device).

Importing this package loads the catalog only; the `Hardware` type is in `facts`.
"""

from __future__ import annotations

from lightspeed.facts.hardware import Calibration, DeviceKind, Hardware
from lightspeed.hardware.catalog import (
    catalog_hardware,
    catalog_id_for_device,
    catalog_id_for_device_name,
    catalog_ids,
)

__all__ = [
    "Calibration",
    "DeviceKind",
    "Hardware",
    "catalog_hardware",
    "catalog_id_for_device",
    "catalog_id_for_device_name",
    "catalog_ids",
]
