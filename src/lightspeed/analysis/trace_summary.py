"""`analyse_traces`: the one entry point from read traces to everything reported about
them: per rank, the whole trace and each step, and the skew between ranks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from lightspeed.analysis.bottleneck_rules import StepBound, max_speedup
from lightspeed.analysis.finding import Finding
from lightspeed.analysis.trace_breakdown import (
    DeviceEvents,
    IdleBreakdown,
    KernelStat,
    Overlap,
    StreamIdle,
    TemporalBreakdown,
    comm_overlap,
    idle_breakdown,
    kernel_stats,
    stream_idle,
    temporal_breakdown,
    type_totals,
)
from lightspeed.analysis.trace_diagnosis import WindowFacts, diagnose
from lightspeed.analysis.trace_host import (
    HostStats,
    LaunchStats,
    host_index,
    host_stats,
    launch_stats,
)
from lightspeed.analysis.trace_names import KernelType, name_types
from lightspeed.analysis.trace_steps import (
    StepWindow,
    count_names,
    device_events,
    device_steps,
    in_window,
    launch_times,
    step_windows,
    whole_window,
)
from lightspeed.trace.events import Kind, Trace

TOP_KERNELS = 10
# Ranks whose step times differ by more than this are reported as skewed.
SKEW_REPORT_FRACTION = 0.1


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowAnalysis:
    """One step of one rank (`step` None: the whole trace)."""

    step: int | None
    temporal: TemporalBreakdown
    idle: IdleBreakdown
    streams: list[StreamIdle]
    overlap: Overlap
    launches: LaunchStats
    host: HostStats
    kernels: list[KernelStat]
    kernel_types: dict[KernelType, float]
    device_syncs: dict[str, int]  # the device's own sync records (`cuda_sync`), by name
    bound: StepBound
    findings: list[Finding]

    @property
    def step_s(self) -> float:
        return max(self.host.window_s, self.temporal.total_s)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankAnalysis:
    """One rank's trace: the whole of it, each step, and what could not be analysed."""

    rank: int
    path: str
    devices: tuple[str, ...]
    whole: WindowAnalysis
    steps: list[WindowAnalysis]
    notes: list[str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepSkew:
    """One step across ranks: each rank's step time and communication time, seconds.

    A rank that computes faster than the others waits for them inside the collectives,
    so the spread of communication time is the time lost to imbalance."""

    step: int
    step_s: dict[int, float]
    communication_s: dict[int, float]

    @property
    def communication_spread_s(self) -> float:
        values = self.communication_s.values()
        return max(values) - min(values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TraceAnalysis:
    """Every rank's analysis, steps compared across ranks, and findings across ranks."""

    ranks: list[RankAnalysis]
    skew: list[StepSkew]
    findings: list[Finding]


def analyse_traces(traces: Sequence[Trace]) -> TraceAnalysis:
    """Analyse each rank's trace, then compare the ranks."""
    ranks = [analyse_rank(t) for t in traces]
    skew = step_skew(ranks)
    return TraceAnalysis(ranks=ranks, skew=skew, findings=_skew_findings(skew))


def analyse_rank(trace: Trace) -> RankAnalysis:
    """The whole trace and each ProfilerStep of one rank."""
    device = device_events(trace)
    launches = launch_times(trace, device)
    types = name_types(trace)
    steps = step_windows(trace)
    index = host_index(trace)
    per_step = device_steps(device, launches, steps)

    def window(w: StepWindow, rows: np.ndarray) -> WindowAnalysis:
        ev = DeviceEvents(
            start_us=device.ts_us[rows],
            end_us=device.end_us[rows],
            type=types[device.name[rows]],
            device=device.pid[rows],
            stream=device.tid[rows],
            launch_us=launches[rows],
            name=device.name[rows],
        )
        facts = WindowFacts(
            temporal=temporal_breakdown(ev),
            idle=idle_breakdown(ev),
            overlap=comm_overlap(ev),
            launches=launch_stats(trace, index, w, device),
            host=host_stats(trace, index, w),
        )
        bound, findings = diagnose(facts)
        return WindowAnalysis(
            step=w.number,
            temporal=facts.temporal,
            idle=facts.idle,
            streams=stream_idle(ev),
            overlap=facts.overlap,
            launches=facts.launches,
            host=facts.host,
            kernels=kernel_stats(ev, trace.names, TOP_KERNELS),
            kernel_types=type_totals(ev),
            device_syncs=_device_syncs(trace, w),
            bound=bound,
            findings=findings,
        )

    all_rows = np.ones(len(device), dtype=bool)
    return RankAnalysis(
        rank=trace.rank or 0,
        path=trace.path,
        devices=trace.device_names,
        whole=window(whole_window(trace), all_rows),
        steps=[window(w, per_step == i) for i, w in enumerate(steps)],
        notes=_notes(trace, steps),
    )


def _device_syncs(trace: Trace, w: StepWindow) -> dict[str, int]:
    syncs = trace.table(Kind.SYNC)
    return count_names(trace, syncs.name[in_window(syncs, w)])


def _notes(trace: Trace, steps: list[StepWindow]) -> list[str]:
    """What the analysis could not use, said plainly."""
    notes = []
    if not len(trace.table(Kind.KERNEL)):
        accelerator = sorted(c for c in trace.skipped if c.endswith(("_ccp_events", "_events")))
        extra = (
            f" (events of category {', '.join(accelerator)} are not read)" if accelerator else ""
        )
        notes.append(f"no GPU kernels in this trace: only the host side is analysed{extra}")
    if not steps:
        notes.append("no ProfilerStep#N annotations: the whole trace is analysed as one step")
    if trace.malformed:
        notes.append(f"{trace.malformed} events could not be read (wrong types or values)")
    if not trace.device_names and len(trace.table(Kind.KERNEL)):
        notes.append("no deviceProperties: the GPU model is unknown")
    return notes


def step_skew(ranks: list[RankAnalysis]) -> list[StepSkew]:
    """Each step that two or more ranks recorded, compared across them."""
    if len(ranks) < 2:
        return []
    by_step: dict[int, StepSkew] = {}
    for r in ranks:
        for w in r.steps:
            if w.step is None:
                continue
            entry = by_step.setdefault(w.step, StepSkew(step=w.step, step_s={}, communication_s={}))
            entry.step_s[r.rank] = w.step_s
            entry.communication_s[r.rank] = w.overlap.communication_s
    return [s for _, s in sorted(by_step.items()) if len(s.step_s) >= 2]


def _skew_findings(skew: list[StepSkew]) -> list[Finding]:
    """Steps whose length differs across ranks: the fast ranks wait at each collective."""
    findings = []
    for s in skew:
        slow = max(s.step_s, key=lambda rank: s.step_s[rank])
        fast = min(s.step_s, key=lambda rank: s.step_s[rank])
        slow_s, fast_s = s.step_s[slow], s.step_s[fast]
        if fast_s <= 0 or slow_s / fast_s - 1 < SKEW_REPORT_FRACTION:
            continue
        findings.append(
            Finding(
                kind="rank-skew",
                message=(
                    f"step {s.step}: rank {slow} takes {slow_s * 1e3:.2f} ms, rank {fast}"
                    f" {fast_s * 1e3:.2f} ms; the faster ranks wait for it in each collective"
                ),
                evidence={
                    "step": s.step,
                    "slowest_rank": slow,
                    "fastest_rank": fast,
                    "slowest_s": slow_s,
                    "fastest_s": fast_s,
                    "communication_spread_s": s.communication_spread_s,
                    "max_speedup": max_speedup((slow_s - fast_s) / slow_s),
                },
            )
        )
    return findings
