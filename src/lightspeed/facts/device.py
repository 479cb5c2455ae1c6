"""`Device`: where a workload runs."""

from __future__ import annotations

import enum

from lightspeed.errors import UnknownNameError, did_you_mean


class Device(str, enum.Enum):
    """Where a workload runs (`--device`)."""

    CPU = "cpu"
    CUDA = "cuda"

    @classmethod
    def parse(cls, name: str) -> Device:
        """The device called `name`, or an error naming the choices."""
        try:
            return cls(name.lower())
        except ValueError:
            choices = [d.value for d in cls]
            raise UnknownNameError(
                f"--device {name!r} is not a device; choose one of {', '.join(choices)}."
                + did_you_mean(name.lower(), choices)
            ) from None
