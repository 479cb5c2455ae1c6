"""Diagnose one window of a trace: its bound, and findings ranked by what fixing them
could gain at most (`bottleneck_rules`)."""

from __future__ import annotations

import dataclasses

from lightspeed.analysis.bottleneck_rules import (
    DATA_LOADING_SHARE,
    DEVICE_IDLE_SHARE,
    EXPOSED_COMMUNICATION_SHARE,
    HOST_OVERHEAD_SHARE,
    SYNC_SHARE,
    TENSOR_CORE_SHAPES_SHARE,
    StepBound,
    max_speedup,
    syncs_dominate,
)
from lightspeed.analysis.finding import Finding
from lightspeed.trace.breakdown import IdleBreakdown, Overlap, TemporalBreakdown
from lightspeed.trace.host import HostStats, LaunchStats
from lightspeed.trace.matmuls import MatmulStats


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowFacts:
    """What the diagnosis reads about one window."""

    temporal: TemporalBreakdown
    idle: IdleBreakdown
    overlap: Overlap
    launches: LaunchStats
    host: HostStats
    matmuls: MatmulStats | None = None

    @property
    def has_device(self) -> bool:
        return self.temporal.total_s > 0

    @property
    def step_s(self) -> float:
        """The window's length: the longer of the CPU step and the device's span."""
        return max(self.host.window_s, self.temporal.total_s)

    @property
    def device_idle_s(self) -> float:
        """Time in the step the device runs nothing (its span's idle and the edges)."""
        return max(0.0, self.step_s - self.temporal.busy_s) if self.has_device else 0.0

    @property
    def edge_idle_s(self) -> float:
        """Idle before the device's first event or after its last, while the step goes on."""
        return max(0.0, self.step_s - self.temporal.total_s) if self.has_device else 0.0


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def diagnose(f: WindowFacts) -> tuple[StepBound, list[Finding]]:
    """The window's bound and its findings, the largest possible gain first."""
    step = f.step_s
    if step <= 0:
        return StepBound.UNKNOWN, []
    findings = []
    data = f.host.data_loading_s / step
    if data >= DATA_LOADING_SHARE:
        findings.append(_data_loading(f, data))
    # On a device a sync costs the idle time it causes (the host waiting while the
    # device works costs nothing); on the CPU alone a sync costs nearly nothing but
    # still stops the host from running ahead, so there its frequency decides.
    sync = ((f.host.sync_lost_s or 0.0) if f.has_device else f.host.sync_s) / step
    dense = not f.has_device and syncs_dominate(f.host.syncs, f.host.ops)
    if sync >= SYNC_SHARE or dense:
        findings.append(_synchronization(f, sync, dense))
    if f.has_device:
        findings += _device_findings(f)
        if f.matmuls is not None and f.matmuls.unaligned_s / step >= TENSOR_CORE_SHAPES_SHARE:
            findings.append(_tensor_core_shapes(f, f.matmuls))
    else:
        overhead = f.host.overhead_s / step
        if overhead >= HOST_OVERHEAD_SHARE:
            findings.append(_host_overhead(f, overhead))
    findings.sort(key=lambda x: -float(x.evidence.get("max_speedup", 1.0)))
    return _bound(f, findings), findings


def _bound(f: WindowFacts, findings: list[Finding]) -> StepBound:
    named = {x.kind for x in findings}
    for bound in (
        StepBound.DATA_LOADING,
        StepBound.SYNCHRONIZATION,
        StepBound.COMMUNICATION,
        StepBound.CPU_LAUNCH_OVERHEAD,
    ):
        if bound.value in named:
            return bound
    if not f.has_device:
        return StepBound.CPU_COMPUTE
    if f.temporal.memory_s > f.temporal.compute_s:
        return StepBound.MEMORY
    return StepBound.GPU_COMPUTE


def _data_loading(f: WindowFacts, share: float) -> Finding:
    return Finding(
        kind=StepBound.DATA_LOADING.value,
        message=(
            f"the step waits {_pct(share)} of its time for the DataLoader: use num_workers > 0,"
            " pin_memory=True, persistent_workers=True and a prefetch_factor, or move"
            " decoding off the training process"
        ),
        evidence={
            "data_loading_s": f.host.data_loading_s,
            "step_s": f.step_s,
            "max_speedup": max_speedup(share),
        },
    )


def _synchronization(f: WindowFacts, share: float, dense: bool) -> Finding:
    per = f"one per {f.host.ops / f.host.syncs:.1f} ops" if f.host.syncs else "none counted"
    if dense:
        how = f"{f.host.syncs} host syncs in the step ({per})"
    elif f.has_device:
        how = (
            f"host syncs cost the device {_pct(share)} of the step (the idle time they drain"
            f" it into, and time spent syncing on an idle device; {f.host.syncs} syncs,"
            f" {_duration(f.host.sync_s)} of host time in them)"
        )
    else:
        how = f"{_pct(share)} of the step is spent in host syncs"
    return Finding(
        kind=StepBound.SYNCHRONIZATION.value,
        message=(
            f"{how}: each makes the host wait for the device, so neither runs ahead;"
            " keep values on the device (no .item(), .cpu(), print or"
            " torch.cuda.synchronize inside the step) and read them once every N steps"
        ),
        evidence={
            "syncs": f.host.syncs,
            "ops": f.host.ops,
            "sync_s": f.host.sync_s,
            **({"sync_lost_s": f.host.sync_lost_s or 0.0} if f.has_device else {}),
            "step_s": f.step_s,
            "max_speedup": max_speedup(share),
        },
    )


def _tensor_core_shapes(f: WindowFacts, m: MatmulStats) -> Finding:
    evidence: dict[str, float | int | str] = {"unaligned_s": m.unaligned_s, "step_s": f.step_s}
    if m.unaligned_excess_s is not None:
        # At best those products would run at their speed of light.
        evidence["max_speedup"] = max_speedup(m.unaligned_excess_s / f.step_s)
    return Finding(
        kind="tensor-core-shapes",
        message=(
            f"{_pct(m.unaligned_s / f.step_s)} of the step runs 16-bit matrix products with a"
            " dimension that is not a multiple of 8, which tensor cores cannot fully use:"
            " pad the hidden size, vocabulary and batch × sequence length to multiples of 8"
            " (64 is better)"
        ),
        evidence=evidence,
    )


def _host_overhead(f: WindowFacts, share: float) -> Finding:
    return Finding(
        kind=StepBound.CPU_LAUNCH_OVERHEAD.value,
        message=(
            f"{_pct(share)} of the step is per-op overhead ({f.host.ops} ops; time in ops"
            " under 20 µs and between ops): batch more work per op, or let torch.compile"
            " fuse the small ops"
        ),
        evidence={
            "overhead_s": f.host.overhead_s,
            "ops": f.host.ops,
            "step_s": f.step_s,
            "max_speedup": max_speedup(share),
        },
    )


def _device_findings(f: WindowFacts) -> list[Finding]:
    step = f.step_s
    found = []
    exposed = f.overlap.exposed_s / step
    if exposed >= EXPOSED_COMMUNICATION_SHARE:
        overlap = f.overlap.fraction or 0.0
        found.append(
            Finding(
                kind=StepBound.COMMUNICATION.value,
                message=(
                    f"communication not hidden by computation takes {_pct(exposed)} of the step"
                    f" ({_pct(overlap)} of it overlaps compute): overlap it (DDP buckets,"
                    " bucket_cap_mb, gradient_as_bucket_view), or communicate less often"
                    " (no_sync during gradient accumulation)"
                ),
                evidence={
                    "communication_s": f.overlap.communication_s,
                    "exposed_s": f.overlap.exposed_s,
                    "overlap_fraction": overlap,
                    "max_speedup": max_speedup(exposed),
                },
            )
        )
    idle = f.device_idle_s / step
    if idle >= DEVICE_IDLE_SHARE:
        # The edges count as waiting for the host: the step is running, the device is not.
        host_wait = f.idle.host_wait_s + f.edge_idle_s
        found.append(
            Finding(
                kind=StepBound.CPU_LAUNCH_OVERHEAD.value,
                message=(
                    f"the device idles {_pct(idle)} of the step, {_pct(host_wait / step)} of the"
                    f" step waiting for the host ({_pct(f.edge_idle_s / step)} before its first"
                    f" or after its last kernel; {f.launches.launches} launches at"
                    f" {_duration(f.launches.cpu_per_launch_s)} of CPU each): CUDA graphs"
                    " (torch.compile mode='reduce-overhead'), fewer and larger kernels"
                    " (torch.compile, a larger batch), less Python per step"
                ),
                evidence={
                    "idle_s": f.device_idle_s,
                    "host_wait_s": host_wait,
                    "launches": f.launches.launches,
                    "shorter_than_launch": f.launches.shorter_than_launch,
                    "step_s": step,
                    "max_speedup": max_speedup(idle),
                },
            )
        )
    else:
        m = f.matmuls
        sol = m.fraction_of_sol if m is not None else None
        products = (
            f"; its matrix products run at {_pct(sol)} of their speed of light on {m.hardware}"
            if m is not None and sol is not None
            else ""
        )
        found.append(
            Finding(
                kind=StepBound.GPU_COMPUTE.value,
                message=(
                    f"the device is busy {_pct(f.temporal.busy_s / step)} of the step"
                    f" ({_pct(f.temporal.compute_s / step)} computing{products}): gains now"
                    " come from faster kernels (mixed precision, tensor-core shapes, fusion);"
                    " `lightspeed profile` shows each op's distance to the roofline"
                ),
                # No bound on the gain: of all kernels, only matrix products (with
                # recorded shapes) have FLOPs and bytes to place on the roofline.
                evidence={
                    "busy_s": f.temporal.busy_s,
                    "compute_s": f.temporal.compute_s,
                    "step_s": step,
                    **({"matmul_fraction_of_sol": sol} if sol is not None else {}),
                },
            )
        )
    return found


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e6:.3g} µs"
