"""The exceptions lightspeed raises on bad input or a failing workload.

Every message says what is wrong and how to fix it, in one line: the CLI prints it
as it is and exits with status 2.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable
from typing import TypeVar

_E = TypeVar("_E", bound=enum.Enum)


class LightspeedError(Exception):
    """Base of every error lightspeed raises on purpose."""


class ConfigError(LightspeedError, ValueError):
    """An option or argument has a value lightspeed cannot use."""


class UnknownNameError(ConfigError, KeyError):
    """A name (hardware id, suite workload, dtype) is not one lightspeed knows."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class TargetError(LightspeedError):
    """A `path/to/file.py:attr` target cannot be loaded as a Workload."""


class WorkloadError(LightspeedError):
    """The user's workload raised while lightspeed built or ran it."""


class OutOfMemoryError(WorkloadError):
    """The workload ran out of device memory."""


class DeviceError(LightspeedError):
    """The requested device is not available on this machine."""


class CalibrationError(LightspeedError):
    """Measuring the local device's ceilings failed or its cache is unreadable."""


class TraceError(LightspeedError):
    """A trace file is missing, unreadable, truncated or not a profiler trace."""


class ProfileIncomplete(LightspeedError):
    """A profile stopped part-way; `partial` holds what was measured before the failure."""

    def __init__(self, message: str, partial: object) -> None:
        super().__init__(message)
        self.partial = partial


class SweepIncomplete(LightspeedError):
    """A sweep stopped part-way; `partial` holds the trials finished before the failure."""

    def __init__(self, message: str, partial: object) -> None:
        super().__init__(message)
        self.partial = partial


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' Did you mean …?' suffix naming the closest of `choices`, or '' if none is close.

    Choices that contain what was typed come first (`a100` → the A100 entries), then
    those that are spelled alike.
    """
    options = list(choices)
    key = name.lower()
    containing = [c for c in options if key and key in c.lower()]
    alike = difflib.get_close_matches(key, options, n=3, cutoff=0.5)
    close = list(dict.fromkeys(containing + alike))[:3]
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"


def parse_choice(choices: type[_E], name: str, flag: str, what: str) -> _E:
    """The member of the str-valued enum `choices` called `name` (case-insensitive), or
    an error saying `flag NAME is not a WHAT`, listing the choices and the closest."""
    try:
        return choices(name.lower())
    except ValueError:
        names = [str(c.value) for c in choices]
        raise UnknownNameError(
            f"{flag} {name!r} is not a {what}; choose one of {', '.join(names)}."
            + did_you_mean(name.lower(), names)
        ) from None
