"""Measure the link between two processes on this machine: ping-pong send/recv under
torchrun (gloo over loopback on a CPU, NCCL between two GPUs), then a latency and a
bandwidth fitted to the times (`fit_link`).

A message of b bytes takes latency + b / bandwidth one way: the smallest messages
give the latency (their half round trip, where the bytes cost next to nothing), the
largest the bandwidth (the slope of time over size, where the latency is a small part).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from lightspeed import progress
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.link import CoRun, Link, LinkMeasurement
from lightspeed.measure.distributed.torchrun import default_threads, run_workers

# Message sizes from 4 B to 64 MiB, ×4 apart.
DEFAULT_SIZES = tuple(4 * 4**i for i in range(13))
# Messages up to this size measure the latency; from this size the bandwidth.
LATENCY_MAX_BYTES = 1024
BANDWIDTH_MIN_BYTES = 2**20
# Seconds each block of round trips lasts, at least.
BLOCK_S = 0.02

WORKER = "lightspeed.measure.distributed.ddp_worker"


def measure_link(
    nproc: int = 2,
    *,
    device: Device = Device.CPU,
    sizes: Sequence[int] = DEFAULT_SIZES,
    threads: int | None = None,
) -> LinkMeasurement:
    """Ping-pong messages of `sizes` bytes between ranks 0 and 1 of `nproc` processes
    started by torchrun (of `threads` threads each; default: the cores shared among
    them), and fit the link's latency (seconds) and one-way bandwidth (bytes/s)."""
    if nproc < 2:
        raise ConfigError(f"--nproc {nproc}: a link needs at least 2 processes.")
    if not sizes or min(sizes) < 1:
        raise ConfigError("message sizes must be 1 byte or more.")
    if threads is not None and threads < 1:
        raise ConfigError(f"--threads {threads} must be at least 1.")
    ordered = sorted(set(sizes))
    threads = threads or default_threads(nproc)
    with progress.stage(f"ping-pong between 2 of {nproc} processes"):
        result = run_workers(
            WORKER,
            [
                "link",
                "--device",
                device.value,
                "--threads",
                str(threads),
                "--min-s",
                str(BLOCK_S),
                "--sizes",
                *map(str, ordered),
            ],
            nproc,
            threads=threads,
            timeout_s=len(ordered) * 8 * BLOCK_S + 60,
        )
    times = {int(k): float(v) for k, v in result["half_round_trip_s"].items()}
    backend = str(result["backend"])
    return fit_link(
        times, link_id=f"measured-{backend}-{_where(device)}", backend=backend, processes=nproc
    )


def _where(device: Device) -> str:
    return "loopback" if device is Device.CPU else "local-gpus"


def fit_link(
    half_round_trip_s: Mapping[int, float],
    *,
    link_id: str,
    backend: str,
    processes: int = 2,
) -> LinkMeasurement:
    """The link whose latency (seconds) is the least half round trip of the messages of
    up to `LATENCY_MAX_BYTES` (the smallest message where none is that small), and whose
    bandwidth (bytes/s) is one over the least-squares slope of half round trip over size
    for the messages of at least `BANDWIDTH_MIN_BYTES` (the two largest where fewer
    than two are that large); where that slope is not positive, the largest message's
    bytes over its time beyond the latency."""
    sizes = sorted(half_round_trip_s)
    if len(sizes) < 2:
        raise ConfigError("fitting a link needs at least two message sizes.")
    small = [s for s in sizes if s <= LATENCY_MAX_BYTES] or sizes[:1]
    latency = min(half_round_trip_s[s] for s in small)
    large = [s for s in sizes if s >= BANDWIDTH_MIN_BYTES]
    if len(large) < 2:
        large = sizes[-2:]
    slope = _slope(large, [half_round_trip_s[s] for s in large])
    if slope > 0:
        bandwidth = 1 / slope
    else:
        biggest = large[-1]
        beyond = half_round_trip_s[biggest] - latency
        bandwidth = biggest / (beyond if beyond > 0 else half_round_trip_s[biggest])
    how = (
        f"measured by lightspeed hw link: ping-pong send/recv between 2 of {processes}"
        f" {backend} processes on this machine"
    )
    link = Link(
        id=link_id,
        name=f"{backend} between two processes on this machine",
        bandwidth_bytes_per_s=bandwidth,
        latency_s=latency,
        sources={
            "*": how,
            "latency_s": f"{how}; the least half round trip of messages of"
            f" {small[0]}–{small[-1]} B",
            "bandwidth_bytes_per_s": f"{how}; one over the slope of time over size, messages"
            f" of {large[0]}–{large[-1]} B",
        },
    )
    return LinkMeasurement(
        link=link,
        half_round_trip_s=dict(half_round_trip_s),
        latency_bytes=tuple(small),
        bandwidth_bytes=tuple(large),
        backend=backend,
        processes=processes,
    )


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


# Seconds each block of a co-run kernel lasts, at least.
CORUN_BLOCK_S = 0.05


def measure_corun(nproc: int, *, device: Device = Device.CPU, threads: int | None = None) -> CoRun:
    """How much slower a process of `threads` threads (None: the cores shared evenly)
    computes beside `nproc − 1` others
    on this machine than alone (`facts.link.CoRun`), from fixed kernels — a matrix
    product, a copy past the caches, tiny ops — timed under torchrun, alone and all at
    once. Processes on GPUs of their own share no device: all 1.0, unmeasured."""
    if nproc < 1:
        raise ConfigError(f"--nproc {nproc} must be at least 1.")
    if nproc == 1 or device is Device.CUDA:
        return CoRun(processes=nproc)
    threads = threads or default_threads(nproc)
    with progress.stage(f"timing kernels alone and in {nproc} processes at once"):
        result = run_workers(
            WORKER,
            [
                "corun",
                "--device",
                device.value,
                "--threads",
                str(threads),
                "--min-s",
                str(CORUN_BLOCK_S),
            ],
            nproc,
            threads=threads,
            timeout_s=120,
        )
    alone, together = result["alone_s"], result["together_s"]
    return CoRun(
        processes=nproc,
        **{name: float(together[name]) / float(alone[name]) for name in alone},
    )
