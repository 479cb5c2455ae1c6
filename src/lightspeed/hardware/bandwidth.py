"""Measured memory bandwidth: from device memory, and from the last-level cache.

Four STREAM-style kernels, each counting every array it reads and every array it
writes once (STREAM's convention, and the one `measure.bytes_moved` uses for ops):

- copy  b = a            2 arrays
- triad a = b + 3·c      3 arrays
- scale a *= -1          2 arrays (a read and written)
- add   a += b           3 arrays (a and b read, a written)

An out-of-place write also reads the destination's cache lines before writing them
(write-allocate), traffic that convention leaves uncounted, so copy and triad read
1.5× and 1.33× lower than the memory really moves. The in-place kernels write lines
they have just read and show the full rate. A ceiling must bound every op, in-place
optimizer updates included, so it is the fastest of the four.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from lightspeed.facts.device import Device
from lightspeed.measure.device import require, synchronizer
from lightspeed.measure.timer import TimerConfig, measure

_FALLBACK_LLC_BYTES = 64 * 2**20
_SMALLEST_CACHE_WORKING_SET = 512 * 2**10


@dataclasses.dataclass(frozen=True)
class _Kernel:
    name: str
    arrays: int  # arrays counted (read or written), each the same size
    run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], object]


def _copy(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> object:
    return b.copy_(a)


def _triad(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> object:
    return torch.add(b, c, alpha=3.0, out=a)


def _scale(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> object:
    # -1 keeps the values ±a forever: a factor below 1 would reach denormals, which
    # some CPUs process far slower.
    return a.mul_(-1.0)


def _add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> object:
    return a.add_(b)


KERNELS = (
    _Kernel("copy", 2, _copy),
    _Kernel("triad", 3, _triad),
    _Kernel("scale", 2, _scale),
    _Kernel("add", 3, _add),
)


def kernel_bandwidths(
    device: Device, elements: int, dtype: torch.dtype, config: TimerConfig
) -> dict[str, float]:
    """Bytes/s of each kernel on arrays of `elements` × `dtype`: counted bytes over the
    fastest replicate (see the module docstring for what is counted)."""
    torch_device = require(device)
    a, b, c = (
        torch.full((elements,), value, dtype=dtype, device=torch_device) for value in (1, 2, 0.5)
    )
    sync = synchronizer(device)
    item = a.element_size()
    rates = {}
    for kernel in KERNELS:
        m = measure(functools.partial(kernel.run, a, b, c), sync=sync, config=config)
        rates[kernel.name] = kernel.arrays * item * elements / m.min_s
    return rates


def memory_bandwidth(device: Device, array_bytes: int, repeats: int) -> dict[str, float]:
    """Bytes/s of each kernel on float64 arrays of `array_bytes` each (far larger than
    the cache), the fastest of at least `repeats` replicates."""
    elements = math.ceil(array_bytes / 8)
    config = TimerConfig(warmup_steps=1, budget_s=0.05, min_replicates=repeats)
    return kernel_bandwidths(device, elements, torch.float64, config)


def cache_bandwidth(
    device: Device, working_sets: Sequence[int], budget_s: float
) -> tuple[int, dict[str, float]] | None:
    """(working set in bytes, bytes/s of each kernel there) for the working set whose
    fastest kernel is fastest, over float32 arrays that together span `working_sets`
    bytes, run back to back so they stay in cache. None when `working_sets` is empty."""
    config = TimerConfig(warmup_steps=3, budget_s=budget_s, min_replicates=10)
    best: tuple[int, dict[str, float]] | None = None
    for working_set in working_sets:
        elements = max(1, working_set // (3 * 4))
        rates = kernel_bandwidths(device, elements, torch.float32, config)
        if best is None or max(rates.values()) > max(best[1].values()):
            best = (working_set, rates)
    return best


def working_sets_in_cache(llc_bytes: int) -> tuple[int, ...]:
    """Working sets, in bytes, that fit in a cache of `llc_bytes`: doubling from 512 KiB
    to half the cache. Below 512 KiB a kernel is over in a few µs and the per-call cost
    of a torch op, not the cache, sets its rate."""
    largest = llc_bytes // 2
    sizes = []
    size = _SMALLEST_CACHE_WORKING_SET
    while size <= largest:
        sizes.append(size)
        size *= 2
    return tuple(sizes) or (largest,)


def last_level_cache_bytes(device: Device) -> int:
    """Size of the largest cache in front of `device`'s memory, in bytes (a guess if unknown)."""
    if device is Device.CUDA:
        size = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)
        return int(size) or _FALLBACK_LLC_BYTES
    sizes = []
    for level_dir in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        with contextlib.suppress(OSError, ValueError):
            sizes.append(parse_cache_size((level_dir / "size").read_text()))
    return max(sizes, default=_FALLBACK_LLC_BYTES)


def parse_cache_size(text: str) -> int:
    """Bytes in a sysfs cache size ("32768K", "1M", "512")."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not match:
        raise ValueError(text)
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]
    return int(match.group(1)) * scale
