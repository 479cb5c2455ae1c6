"""Devices a workload runs on, and how to wait for the work queued on them."""

from __future__ import annotations

import enum
from collections.abc import Callable

import torch

from lightspeed.errors import DeviceError, UnknownNameError, did_you_mean


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


def require(device: Device) -> torch.device:
    """The torch device for `device`, or an error if this machine lacks it."""
    if device is Device.CUDA and not torch.cuda.is_available():
        raise DeviceError(
            "--device cuda: PyTorch sees no CUDA GPU here (torch.cuda.is_available() is"
            " False); run with --device cpu, or on a machine with a GPU and a CUDA build"
            " of torch."
        )
    return torch.device(device.value)


def synchronizer(device: Device) -> Callable[[], None]:
    """A function that returns once all work queued on `device` has finished.

    CPU ops run synchronously, so waiting there is a no-op; CUDA kernels run
    asynchronously and a timer must wait for them before reading the clock.
    """
    if device is Device.CUDA:
        return torch.cuda.synchronize
    return _no_wait


def _no_wait() -> None:
    return None


def device_name(device: Device) -> str:
    """The name of the local `device`: the GPU's marketing name or the CPU model."""
    if device is Device.CUDA:
        return torch.cuda.get_device_name()
    return cpu_model_name()


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo, or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"
