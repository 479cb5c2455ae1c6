"""`Device`: where a workload runs."""

from __future__ import annotations

import enum

from lightspeed.errors import parse_choice


class Device(str, enum.Enum):
    """Where a workload runs (`--device`)."""

    CPU = "cpu"
    CUDA = "cuda"

    @classmethod
    def parse(cls, name: str) -> Device:
        """The device called `name`, or an error naming the choices."""
        return parse_choice(cls, name, "--device", "device")
