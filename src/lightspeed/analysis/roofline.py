"""The roofline: where an amount of work sits against a device's compute and memory ceilings.

speed of light (SoL) = max(flops / peak_flops, bytes / bandwidth): the least time the
work could take if compute and memory traffic overlapped perfectly.
"""

from __future__ import annotations

import dataclasses

from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware, MemoryLevel
from lightspeed.rules import Bound

__all__ = ["Bound", "Ceilings", "RooflinePoint", "peak_precision", "place", "place_on"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ceilings:
    """The two roofs: peak math rate (FLOP/s) and memory bandwidth (bytes/s)."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float

    def __post_init__(self) -> None:
        if not self.peak_flops_per_s > 0:
            raise ConfigError(f"--peak-flops {self.peak_flops_per_s} must be positive.")
        if not self.bandwidth_bytes_per_s > 0:
            raise ConfigError(f"--bandwidth {self.bandwidth_bytes_per_s} must be positive.")

    @classmethod
    def of(
        cls,
        hardware: Hardware,
        precision: Precision,
        level: MemoryLevel = MemoryLevel.DRAM,
        *,
        matrix: bool = False,
    ) -> Ceilings:
        """The ceilings of `hardware` for math in `precision`, bytes coming from `level`:
        the peak of its matrix units for a `matrix` product (`Hardware.matmul_peak`),
        else the vector rate."""
        peak = hardware.matmul_peak(precision) if matrix else hardware.peak(precision)
        return cls(peak_flops_per_s=peak, bandwidth_bytes_per_s=hardware.bandwidth(level))

    @property
    def ridge_flops_per_byte(self) -> float:
        """Intensity at which the two roofs meet: peak / bandwidth."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s


@dataclasses.dataclass(frozen=True, kw_only=True)
class RooflinePoint:
    """`flops` FLOPs moving `bytes` bytes, placed on the roofline of `ceilings`."""

    flops: float
    bytes: float
    ceilings: Ceilings

    def __post_init__(self) -> None:
        if self.flops < 0:
            raise ConfigError(f"--flops {self.flops} must be 0 or more.")
        if self.bytes < 0:
            raise ConfigError(f"--bytes {self.bytes} must be 0 or more.")
        if self.flops == 0 and self.bytes == 0:
            raise ConfigError("--flops and --bytes are both 0: there is no work to place.")

    @property
    def intensity_flops_per_byte(self) -> float:
        """FLOPs per byte moved (infinite when nothing is moved)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.ceilings.ridge_flops_per_byte

    @property
    def bound(self) -> Bound:
        """`compute` at or above the ridge point, else `memory`."""
        if self.intensity_flops_per_byte >= self.ridge_flops_per_byte:
            return Bound.COMPUTE
        return Bound.MEMORY

    @property
    def attainable_flops_per_s(self) -> float:
        """min(peak, intensity × bandwidth): the highest rate this intensity allows."""
        return min(
            self.ceilings.peak_flops_per_s,
            self.intensity_flops_per_byte * self.ceilings.bandwidth_bytes_per_s,
        )

    @property
    def compute_time_s(self) -> float:
        return self.flops / self.ceilings.peak_flops_per_s

    @property
    def memory_time_s(self) -> float:
        return self.bytes / self.ceilings.bandwidth_bytes_per_s

    @property
    def sol_time_s(self) -> float:
        """Speed-of-light time in seconds: max(compute time, memory time)."""
        return max(self.compute_time_s, self.memory_time_s)

    def efficiency(self, measured_time_s: float) -> float:
        """Fraction of the speed of light reached: SoL time / measured time."""
        if not measured_time_s > 0:
            raise ValueError("measured time must be positive")
        return self.sol_time_s / measured_time_s

    def headroom_s(self, measured_time_s: float) -> float:
        """Measured time − SoL time, in seconds: what could at most be saved."""
        return measured_time_s - self.sol_time_s


def place(flops: float, bytes_moved: float, ceilings: Ceilings) -> RooflinePoint:
    """Place `flops` FLOPs and `bytes_moved` bytes on the roofline of `ceilings`."""
    return RooflinePoint(flops=flops, bytes=bytes_moved, ceilings=ceilings)


def peak_precision(precision: Precision, hardware: Hardware) -> Precision:
    """The precision whose peak bounds math in `precision` on `hardware`: itself when
    the hardware has a peak for it, else fp32 (else its first peak). A lower bound
    stays one: no precision runs faster than the device's fastest listed peak for it."""
    if precision in hardware.peak_flops_per_s:
        return precision
    return (
        Precision.FP32
        if Precision.FP32 in hardware.peak_flops_per_s
        else next(iter(hardware.peak_flops_per_s))
    )


def place_on(
    hardware: Hardware,
    flops: float,
    bytes_moved: float,
    precision: Precision,
    level: MemoryLevel = MemoryLevel.DRAM,
    *,
    matrix: bool = False,
) -> RooflinePoint:
    """Place work on `hardware`'s roofline: math in `precision` (see `peak_precision`)
    on the matrix units when `matrix` (a matrix product), bytes from `level`."""
    ceilings = Ceilings.of(hardware, peak_precision(precision, hardware), level, matrix=matrix)
    return place(flops, bytes_moved, ceilings)


def roofline_to_dict(point: RooflinePoint) -> dict[str, float | str]:
    """The JSON keys of `lightspeed roofline --json`."""
    return {
        "flops": point.flops,
        "bytes": point.bytes,
        "peak_flops_per_s": point.ceilings.peak_flops_per_s,
        "bandwidth_bytes_per_s": point.ceilings.bandwidth_bytes_per_s,
        "intensity_flops_per_byte": point.intensity_flops_per_byte,
        "ridge_flops_per_byte": point.ridge_flops_per_byte,
        "attainable_flops_per_s": point.attainable_flops_per_s,
        "compute_time_s": point.compute_time_s,
        "memory_time_s": point.memory_time_s,
        "sol_time_s": point.sol_time_s,
        "bound": point.bound.value,
    }
