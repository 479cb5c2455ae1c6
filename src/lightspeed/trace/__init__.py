"""Trace diagnosis: torch.profiler (Kineto) traces read, analysed and diagnosed.

    from lightspeed import trace
    analysis = trace.analyse(["run/"])        # files or directories of per-rank traces
    analysis.ranks[0].whole.bound, analysis.findings

Reading (`json_stream`, `columns`, `events`, `load`) streams a file into numpy
columns by event kind; `analysis` runs every window analysis of the registry on each
rank's whole trace and each ProfilerStep, then `diagnosis` names the bound. Nothing
here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lightspeed import progress
from lightspeed.trace.analysis import (
    RankAnalysis,
    StepSkew,
    TraceAnalysis,
    WindowAnalysis,
    analyse_rank,
    analyse_traces,
)
from lightspeed.trace.events import Kind, Trace
from lightspeed.trace.load import (
    can_fork,
    load_trace,
    load_traces,
    no_cycle_collection,
    trace_files,
)
from lightspeed.trace.ranks import (
    analyse_in_pool,
    analyse_on_dask,
    available_memory,
    check_memory,
    dask_address,
    pool_size,
)

__all__ = [
    "Kind",
    "RankAnalysis",
    "StepSkew",
    "Trace",
    "TraceAnalysis",
    "WindowAnalysis",
    "analyse",
    "analyse_rank",
    "analyse_traces",
    "load_trace",
    "load_traces",
]


def analyse(
    paths: Sequence[str | Path],
    *,
    include_last_step: bool = False,
    timeline_step: int | None = None,
    workers: int | None = None,
    executor: str = "local",
    max_memory_bytes: int | None = None,
) -> TraceAnalysis:
    """Read the traces `paths` name (files, or directories of per-rank traces) and
    analyse them: each rank, each step, and the ranks against each other. The whole-trace
    figures leave the last ProfilerStep out, as HolisticTraceAnalysis does, unless
    `include_last_step`; the timelines show ProfilerStep#`timeline_step` (default: a
    middle step every rank recorded). Several traces are read by `workers` processes (by
    default as many as the cores and the memory allow, `ranks.pool_size`; 1: in this
    process), each rank analysed where it is read (`ranks.analyse_in_pool`). `executor`
    "dask" does the same on a local Dask cluster, "dask=ADDRESS" on the cluster whose
    scheduler is there (`ranks.analyse_on_dask`). Files whose estimated need exceeds
    `max_memory_bytes` (None: the memory available) are refused before any is read,
    and the pool is sized to it (`ranks.check_memory`, `ranks.pool_size`)."""
    files = trace_files(paths)
    limit = max_memory_bytes if max_memory_bytes is not None else available_memory()
    check_memory(files, limit, max_memory_bytes is not None, together=executor == "local")
    if executor != "local":
        address = dask_address(executor)
        with progress.stage(f"reading and analysing {len(files)} traces on Dask"):
            return analyse_on_dask(
                files,
                address,
                workers=workers,
                include_last_step=include_last_step,
                timeline_step=timeline_step,
            )
    if workers is None:
        workers = pool_size(files, limit) if len(files) > 1 and can_fork() else 1
    if workers > 1:
        with progress.stage(f"reading and analysing {len(files)} traces in {workers} processes"):
            return analyse_in_pool(
                files, workers, include_last_step=include_last_step, timeline_step=timeline_step
            )
    with progress.stage("reading the traces"):
        traces = load_traces(files)
    with progress.stage("analysing the traces"), no_cycle_collection():
        return analyse_traces(
            traces, include_last_step=include_last_step, timeline_step=timeline_step
        )
