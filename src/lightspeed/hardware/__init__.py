"""Hardware as data: the `Hardware` type, the cited catalog, and local calibration.

`resolve_hardware` and the calibration behind it load on first use: they need torch,
the catalog and the `Hardware` type do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightspeed.hardware.catalog import catalog_hardware, catalog_id_for_device_name, catalog_ids
from lightspeed.hardware.model import Calibration, DeviceKind, Hardware

_FROM_RESOLVE = frozenset({"LOCAL", "local_hardware", "resolve_hardware"})

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


def __getattr__(name: str) -> Any:
    if name not in _FROM_RESOLVE:
        raise AttributeError(f"module 'lightspeed.hardware' has no attribute {name!r}")
    from lightspeed.hardware import resolve

    return getattr(resolve, name)


if TYPE_CHECKING:
    from lightspeed.hardware.resolve import LOCAL, local_hardware, resolve_hardware
