"""Diagnose one window of a trace: its facts reduced to `rules.StepFacts`, whose rules
name its bound and its findings, ranked by what fixing them could gain at most."""

from __future__ import annotations

import dataclasses

from lightspeed.dtypes import Precision
from lightspeed.rules import Diagnosis, StepFacts, diagnose
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


def step_facts(f: WindowFacts) -> StepFacts:
    """The window as the rules read it. With a device, overhead is the time it idles
    in the step (gaps and edges alike), syncs cost the idle time they cause, and
    memory time is copies and sets; on the CPU alone, overhead is the time in no op of
    at least `rules.SMALL_OP_S`, no data loading and no sync."""
    m = f.matmuls
    host = StepFacts(
        step_s=f.step_s,
        device=f.has_device,
        data_loading_s=f.host.data_loading_s,
        sync_s=f.host.sync_s,
        syncs=f.host.syncs,
        ops=f.host.ops,
        sync_cost_s=f.host.sync_s,
        overhead_s=f.host.overhead_s,
    )
    if not f.has_device:
        return host
    return dataclasses.replace(
        host,
        sync_cost_s=f.host.sync_lost_s or 0.0,
        exposed_communication_s=f.overlap.exposed_s,
        communication_s=f.overlap.communication_s,
        overlap_fraction=f.overlap.fraction,
        overhead_s=f.device_idle_s,
        # The edges count as waiting for the host: the step is running, the device is not.
        host_wait_s=f.idle.host_wait_s + f.edge_idle_s,
        edge_idle_s=f.edge_idle_s,
        launches=f.launches.launches,
        shorter_than_launch=f.launches.shorter_than_launch,
        cpu_per_launch_s=f.launches.cpu_per_launch_s,
        compute_s=f.temporal.compute_s,
        memory_s=f.temporal.memory_s,
        busy_s=f.temporal.busy_s,
        matmul_fraction_of_sol=None if m is None else m.fraction_of_sol,
        matmul_hardware=None if m is None else m.hardware,
        unaligned_s=0.0 if m is None else m.unaligned_s,
        unaligned_excess_s=None if m is None else m.unaligned_excess_s,
        unaligned_precisions=()
        if m is None
        else tuple(Precision(p) for p in sorted(m.unaligned_by_precision)),
    )


def diagnose_window(f: WindowFacts) -> Diagnosis:
    """The window's bound and its findings, the largest possible gain first."""
    return diagnose(step_facts(f))
