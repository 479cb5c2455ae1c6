"""Diagnose one window of a trace: its facts reduced to `rules.StepFacts`, whose rules
name its bound and its findings, ranked by what fixing them could gain at most."""

from __future__ import annotations

import dataclasses
from typing import Any

from lightspeed.dtypes import Precision
from lightspeed.rules import Diagnosis, StepFacts, diagnose
from lightspeed.trace.breakdown import IdleBreakdown, Overlap, TemporalBreakdown
from lightspeed.trace.host import HostStats, LaunchStats
from lightspeed.trace.idle_causes import IdleCauses
from lightspeed.trace.matmuls import MatmulStats
from lightspeed.trace.packed import record


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WindowFacts:
    """What the diagnosis reads about one window."""

    temporal: TemporalBreakdown
    idle: IdleBreakdown
    overlap: Overlap
    launches: LaunchStats
    host: HostStats
    matmuls: MatmulStats | None = None
    idle_causes: IdleCauses | None = None

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
    """The window as the rules read it.

    With a device: the device's idle time goes to what the host was doing meanwhile
    (`idle_causes`): in syncs and in copy calls that block it, the syncs' cost (with
    the idle gaps syncs drain the device into); waiting in collectives, exposed
    communication beside the device's own; loading data, data loading; the rest
    (launching, CPU ops, nothing recorded), overhead, the device waiting for the
    host's per-op work. Memory time is copies and sets. On a CPU alone: syncs cost
    their time, the host's collectives are exposed communication, and overhead is the
    time in no op of at least `rules.SMALL_OP_S`, no data loading, no sync and no
    collective.
    """
    m = f.matmuls
    host: dict[str, Any] = dict(
        step_s=f.step_s,
        device=f.has_device,
        data_loading_s=f.host.data_loading_s,
        loader_workers=f.host.loader_workers,
        sync_s=f.host.sync_s,
        syncs=f.host.syncs,
        ops=f.host.ops,
        sync_cost_s=f.host.sync_s,
        exposed_communication_s=f.host.collective_s,
        host_collective_s=f.host.collective_s,
        overhead_s=f.host.overhead_s,
        busy_s=f.host.busy_s,
    )
    if not f.has_device:
        return record(StepFacts, host)
    c = f.idle_causes or _unattributed(f)
    # One construction, not a replace of the host's: a long trace has 100,000 steps.
    device: dict[str, Any] = dict(
        # The syncs' cost as the host saw it in its window, or the device's idle time in
        # the step's own span while the host sat in a sync (a device lagging its host
        # runs the step past the host's window, which the host's figure does not see).
        sync_cost_s=min(
            f.device_idle_s, max(f.host.sync_lost_s or 0.0, c.in_sync_s) + c.in_copy_calls_s
        ),
        blocking_copy_s=c.in_copy_calls_s,
        exposed_communication_s=f.overlap.exposed_s + c.in_collectives_s,
        host_collective_s=c.in_collectives_s,
        communication_s=f.overlap.communication_s,
        overlap_fraction=f.overlap.fraction,
        # The idle time and its parts from one attribution of the same instants, so
        # that no part is larger than its whole.
        overhead_s=c.overhead_s,
        host_wait_s=c.host_wait_s,
        edge_idle_s=c.edges_s,
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
    return record(StepFacts, host | device)


def _unattributed(f: WindowFacts) -> IdleCauses:
    """Idle causes for facts that come without them: all the device's idle time the
    host's per-op work, waiting for the host in HTA's wait gaps and at the edges (the
    step is running, the device is not)."""
    idle_s = f.device_idle_s
    return IdleCauses(
        idle_s=idle_s,
        unrecorded_s=idle_s,
        host_wait_s=min(idle_s, f.idle.host_wait_s + f.edge_idle_s),
        edges_s=min(idle_s, f.edge_idle_s),
    )


def diagnose_window(f: WindowFacts) -> Diagnosis:
    """The window's bound and its findings, the largest possible gain first."""
    return diagnose(step_facts(f))
