"""`Hardware`: a device's ceilings, as cited datasheet numbers or as measured locally."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError, UnknownNameError


class DeviceKind(str, enum.Enum):
    """What a Hardware is: a CPU or a GPU (any accelerator that runs as one)."""

    CPU = "cpu"
    GPU = "gpu"


class MemoryLevel(str, enum.Enum):
    """Where the bytes an op moves can come from: on-chip cache or device memory."""

    CACHE = "cache"
    DRAM = "dram"


# Arrays read and arrays written per call by each calibration bandwidth kernel
# (`hardware.bandwidth` runs them), from read-only to write-only.
BANDWIDTH_KERNEL_ACCESSES: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        "read": (1, 0),
        "write": (0, 1),
        "copy": (1, 1),
        "scale": (1, 1),
        "add": (2, 1),
        "triad": (2, 1),
        "addcdiv": (3, 1),
    }
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
    """How a calibrated Hardware's ceilings were measured on this machine."""

    method: str
    library: str
    threads: int
    torch_version: str
    measured_at: str
    # The size n (`hardware.compute_kernels`) and the kernel at which each precision's
    # best rate was seen, and every compute kernel's best rate per precision, FLOP/s.
    best_matmul_size: Mapping[Precision, int] = dataclasses.field(default_factory=dict)
    best_compute_kernel: Mapping[Precision, str] = dataclasses.field(default_factory=dict)
    compute_kernel_flops_per_s: Mapping[Precision, Mapping[str, float]] = dataclasses.field(
        default_factory=dict
    )
    # Bytes/s of each bandwidth kernel (`hardware.bandwidth.KERNELS`) from memory, on
    # arrays of `stream_array_bytes` each, and from cache, on arrays spanning
    # `cache_working_set_bytes` together (the working set where the best was seen).
    memory_kernel_bytes_per_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    stream_array_bytes: int | None = None
    cache_kernel_bytes_per_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    cache_working_set_bytes: int | None = None
    # The 1-minute load average when calibration began: a busy machine gives low ceilings.
    load_average: float | None = None
    duration_s: float | None = None
    # A short kernel's rate right after calibrating: timed again before the cached
    # calibration is used, it tells whether the machine still runs as it did then.
    canary_kernel: str | None = None
    canary_flops_per_s: float | None = None
    # The canary's rate just before calibrating: far from the rate after, the machine's
    # speed changed while the kernels ran.
    canary_before_flops_per_s: float | None = None

    def peak_kernel(self, precision: Precision) -> str | None:
        """The compute kernel that set `precision`'s peak, as `mm-nt n=1024`; None when
        the calibration did not record it."""
        kernel = self.best_compute_kernel.get(precision)
        if kernel is None:
            return None
        size = self.best_matmul_size.get(precision)
        return kernel if size is None else f"{kernel} n={size}"

    def memory_roof_kernel(self, level: MemoryLevel) -> str | None:
        """The bandwidth kernel that set the roof of `level` with its read:write ratio,
        as `addcdiv 3:1`; None when no kernel was measured there."""
        rates = (
            self.cache_kernel_bytes_per_s
            if level is MemoryLevel.CACHE
            else self.memory_kernel_bytes_per_s
        )
        if not rates:
            return None
        name = max(rates, key=lambda k: rates[k])
        return f"{name} {read_write_ratio(name)}"


def read_write_ratio(kernel: str) -> str:
    """`reads:writes` of a calibration bandwidth kernel, e.g. `3:1`; `?:?` if unknown."""
    reads, writes = BANDWIDTH_KERNEL_ACCESSES.get(kernel, ("?", "?"))
    return f"{reads}:{writes}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hardware:
    """The ceilings of one device.

    `peak_flops_per_s` maps each supported precision to its dense peak in FLOP/s;
    a precision that is absent is unsupported or unknown. Link bandwidths are the
    datasheet's aggregate (both directions) figure in bytes/s. `sources` maps a field
    name (or `peak_flops_per_s.<precision>`) to where its number comes from; `"*"`
    covers every field not named. A measured device carries its `calibration`.

    `cache_bytes` and `cache_bandwidth_bytes_per_s`, when known, are the last-level
    cache and the bandwidth measured from it: work whose bytes fit there can run at
    that rate, so its speed of light uses it instead of the memory bandwidth.

    `matrix_peak_flops_per_s` holds the peaks of the matrix units for the precisions
    where they differ from `peak_flops_per_s`, the vector rate (AMD Instinct fp32 on
    MFMA: twice the vector rate on an MI100); `matmul_peak` picks a matrix product's.
    The datasheet facts beside the ceilings: `clock_hz`, the boost clock the peaks
    assume; `l2_bytes`, the L2 cache; `board_power_w`, the board's power limit (TDP);
    `vendor`, such as "nvidia" or "amd"; `process_nm`, the manufacturing process's
    nominal feature size in nanometres as the vendor names it (TSMC 4N: 4, Samsung
    8N: 8); `transistors_per_mm2`, the transistor density of the die that does the
    math, the vendor's transistor count over its die area. `sm_count` counts SMs, or an
    AMD GPU's CUs.
    """

    id: str
    name: str
    kind: DeviceKind
    peak_flops_per_s: Mapping[Precision, float]
    memory_bandwidth_bytes_per_s: float
    memory_bytes: int | None = None
    sm_count: int | None = None
    gpu_link_bytes_per_s: float | None = None
    host_link_bytes_per_s: float | None = None
    cache_bytes: int | None = None
    cache_bandwidth_bytes_per_s: float | None = None
    matrix_peak_flops_per_s: Mapping[Precision, float] = dataclasses.field(default_factory=dict)
    clock_hz: float | None = None
    l2_bytes: int | None = None
    board_power_w: float | None = None
    vendor: str | None = None
    process_nm: float | None = None
    transistors_per_mm2: float | None = None
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        if self.memory_bandwidth_bytes_per_s <= 0:
            raise ConfigError(f"hardware {self.id!r}: memory bandwidth must be positive.")
        if (self.cache_bytes is None) != (self.cache_bandwidth_bytes_per_s is None):
            raise ConfigError(
                f"hardware {self.id!r}: give both cache_bytes and cache_bandwidth_bytes_per_s,"
                " or neither."
            )
        if self.cache_bandwidth_bytes_per_s is not None and not (
            self.cache_bandwidth_bytes_per_s > 0 and (self.cache_bytes or 0) > 0
        ):
            raise ConfigError(f"hardware {self.id!r}: cache size and bandwidth must be positive.")
        for kind, peaks in (("", self.peak_flops_per_s), (" matrix", self.matrix_peak_flops_per_s)):
            for precision, peak in peaks.items():
                if peak <= 0:
                    raise ConfigError(
                        f"hardware {self.id!r}: {precision.value}{kind} peak must be positive."
                    )
        for name in (
            "clock_hz",
            "l2_bytes",
            "board_power_w",
            "process_nm",
            "transistors_per_mm2",
        ):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"hardware {self.id!r}: {name} must be positive.")
        # Freeze the mappings so a Hardware cannot change after it is made.
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))
        object.__setattr__(
            self, "matrix_peak_flops_per_s", MappingProxyType(dict(self.matrix_peak_flops_per_s))
        )
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def peak(self, precision: Precision) -> float:
        """The dense peak of `precision` in FLOP/s, or an error naming those known."""
        try:
            return self.peak_flops_per_s[precision]
        except KeyError:
            known = ", ".join(p.value for p in self.peak_flops_per_s) or "none"
            raise UnknownNameError(
                f"{self.name} has no {precision.value} peak (known: {known}); pick another"
                " --dtype or --hardware."
            ) from None

    def matmul_peak(self, precision: Precision) -> float:
        """The dense peak of a matrix product in `precision`, FLOP/s: the matrix units'
        where they differ from the vector rate, else `peak(precision)`."""
        matrix = self.matrix_peak_flops_per_s.get(precision)
        return self.peak(precision) if matrix is None else matrix

    def memory_level(self, bytes_moved: float) -> MemoryLevel:
        """The fastest level `bytes_moved` bytes fit in: the cache when they fit, else DRAM."""
        if self.cache_bytes is not None and bytes_moved <= self.cache_bytes:
            return MemoryLevel.CACHE
        return MemoryLevel.DRAM

    def bandwidth(self, level: MemoryLevel) -> float:
        """Bytes/s from `level`."""
        if level is MemoryLevel.CACHE and self.cache_bandwidth_bytes_per_s is not None:
            return self.cache_bandwidth_bytes_per_s
        return self.memory_bandwidth_bytes_per_s

    def source_of(self, field: str) -> str | None:
        """Where the number in `field` comes from, if cited."""
        return self.sources.get(field, self.sources.get("*"))


def hardware_to_dict(hw: Hardware) -> dict[str, Any]:
    """A JSON-ready dict of `hw` (keys as `lightspeed hw show --json` prints them)."""
    data: dict[str, Any] = {
        "id": hw.id,
        "name": hw.name,
        "kind": hw.kind.value,
        "peak_flops_per_s": {p.value: v for p, v in hw.peak_flops_per_s.items()},
        "memory_bandwidth_bytes_per_s": hw.memory_bandwidth_bytes_per_s,
        "memory_bytes": hw.memory_bytes,
        "sm_count": hw.sm_count,
        "gpu_link_bytes_per_s": hw.gpu_link_bytes_per_s,
        "host_link_bytes_per_s": hw.host_link_bytes_per_s,
        "cache_bytes": hw.cache_bytes,
        "cache_bandwidth_bytes_per_s": hw.cache_bandwidth_bytes_per_s,
        "matrix_peak_flops_per_s": {p.value: v for p, v in hw.matrix_peak_flops_per_s.items()},
        "clock_hz": hw.clock_hz,
        "l2_bytes": hw.l2_bytes,
        "board_power_w": hw.board_power_w,
        "vendor": hw.vendor,
        "process_nm": hw.process_nm,
        "transistors_per_mm2": hw.transistors_per_mm2,
        "sources": dict(hw.sources),
        "calibration": None,
    }
    if hw.calibration is not None:
        cal = dataclasses.asdict(hw.calibration)
        cal["best_matmul_size"] = {p.value: n for p, n in hw.calibration.best_matmul_size.items()}
        cal["best_compute_kernel"] = {
            p.value: k for p, k in hw.calibration.best_compute_kernel.items()
        }
        cal["compute_kernel_flops_per_s"] = {
            p.value: dict(rates) for p, rates in hw.calibration.compute_kernel_flops_per_s.items()
        }
        data["calibration"] = cal
    return data


def hardware_from_dict(data: Mapping[str, Any]) -> Hardware:
    """The Hardware that `hardware_to_dict` wrote."""
    cal_data = data.get("calibration")
    calibration = None
    if cal_data is not None:
        cal = dict(cal_data)
        cal["best_matmul_size"] = {
            Precision(p): int(n) for p, n in cal.get("best_matmul_size", {}).items()
        }
        cal["best_compute_kernel"] = {
            Precision(p): str(k) for p, k in cal.get("best_compute_kernel", {}).items()
        }
        cal["compute_kernel_flops_per_s"] = {
            Precision(p): {str(k): float(v) for k, v in rates.items()}
            for p, rates in cal.get("compute_kernel_flops_per_s", {}).items()
        }
        calibration = Calibration(**cal)
    return Hardware(
        id=str(data["id"]),
        name=str(data["name"]),
        kind=DeviceKind(data["kind"]),
        peak_flops_per_s=peaks_of(data["peak_flops_per_s"]),
        memory_bandwidth_bytes_per_s=float(data["memory_bandwidth_bytes_per_s"]),
        memory_bytes=_opt_int(data.get("memory_bytes")),
        sm_count=_opt_int(data.get("sm_count")),
        gpu_link_bytes_per_s=optional_float(data.get("gpu_link_bytes_per_s")),
        host_link_bytes_per_s=optional_float(data.get("host_link_bytes_per_s")),
        cache_bytes=_opt_int(data.get("cache_bytes")),
        cache_bandwidth_bytes_per_s=optional_float(data.get("cache_bandwidth_bytes_per_s")),
        matrix_peak_flops_per_s=peaks_of(data.get("matrix_peak_flops_per_s") or {}),
        clock_hz=optional_float(data.get("clock_hz")),
        l2_bytes=_opt_int(data.get("l2_bytes")),
        board_power_w=optional_float(data.get("board_power_w")),
        vendor=None if data.get("vendor") is None else str(data["vendor"]),
        process_nm=optional_float(data.get("process_nm")),
        transistors_per_mm2=optional_float(data.get("transistors_per_mm2")),
        sources=dict(data.get("sources", {})),
        calibration=calibration,
    )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def optional_float(value: Any) -> float | None:
    """`value` as a float; None stays None (a figure not known)."""
    return None if value is None else float(value)


def peaks_of(table: Mapping[str, Any]) -> dict[Precision, float]:
    """A peaks table as JSON and the catalog write it (precision name → FLOP/s) as the
    `Precision` → FLOP/s mapping `Hardware` holds."""
    return {Precision(p): float(v) for p, v in table.items()}
