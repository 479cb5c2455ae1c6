"""Time a workload's training step in N processes under DistributedDataParallel:
`time_data_parallel` → `DataParallelTiming`.

torchrun starts N workers (`measure/ddp_worker`, `step`); each builds the workload at
its own batch size (the per-device batch: weak scaling), wraps the model in DDP
(gloo on a CPU, NCCL on CUDA) and times the step with the single-process timer. The
timer's clock is agreed among the ranks (`ddp_worker.agreed_clock`), so each replicate
is the time from the last rank starting its block to the last rank ending it: the
slowest rank's time. Rank 0 reports the replicates.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lightspeed import progress
from lightspeed.errors import ConfigError
from lightspeed.facts.timing import Measurement, NoiseCheck, StepTiming
from lightspeed.measure.distributed.torchrun import default_threads, run_workers
from lightspeed.measure.step import StepSettings
from lightspeed.measure.timer import TimerConfig
from lightspeed.measure.workload_timing import workload_info
from lightspeed.workload import Workload

WORKER = "lightspeed.measure.distributed.ddp_worker"
# DistributedDataParallel's default bucket_cap_mb.
BUCKET_CAP_MB = 25.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataParallelTiming:
    """The step of each of `processes` processes under DDP over `backend`, `threads`
    threads each. `timing`'s workload has the global batch (processes × per-device
    batch), so its samples/s count every process's samples."""

    timing: StepTiming
    processes: int
    per_device_batch: int
    threads: int
    backend: str


def time_data_parallel(
    target: str,
    workload: Workload,
    settings: StepSettings,
    processes: int,
    *,
    config: TimerConfig | None = None,
    threads: int | None = None,
    bucket_cap_mb: float = BUCKET_CAP_MB,
) -> DataParallelTiming:
    """Time `workload` (loaded from `target`, a suite name or file.py:NAME) at its batch
    size in each of `processes` processes under DDP; seconds per step and samples/s over
    all processes."""
    if processes < 1:
        raise ConfigError(f"--nproc {processes} must be at least 1.")
    if workload.step is not None:
        raise ConfigError(
            f"workload {workload.name!r} runs its own step (several models or optimizers);"
            " --nproc times only a step of one model under DistributedDataParallel."
        )
    if threads is not None and threads < 1:
        raise ConfigError(f"--threads {threads} must be at least 1.")
    cfg = config or TimerConfig()
    threads = threads or default_threads(processes)
    args = [
        "step",
        "--target",
        target,
        "--batch-size",
        str(workload.batch_size),
        "--device",
        settings.device.value,
        "--dtype",
        settings.dtype.value,
        "--threads",
        str(threads),
        "--bucket-cap-mb",
        str(bucket_cap_mb),
        "--warmup",
        str(cfg.warmup_steps),
        "--budget",
        str(cfg.budget_s),
        "--min-replicates",
        str(cfg.min_replicates),
    ]
    with progress.stage(f"timing the step in {processes} processes"):
        result = run_workers(
            WORKER,
            args,
            processes,
            threads=threads,
            timeout_s=cfg.max_settle_s + 10 * cfg.budget_s + 60,
        )
    info = workload_info(workload, settings, result["parameter_count"])
    info = dataclasses.replace(info, batch_size=processes * workload.batch_size)
    return DataParallelTiming(
        timing=StepTiming(workload=info, measurement=_measurement(result["measurement"])),
        processes=processes,
        per_device_batch=workload.batch_size,
        threads=threads,
        backend=str(result["backend"]),
    )


def _measurement(data: dict[str, Any]) -> Measurement:
    """The Measurement a worker wrote with `dataclasses.asdict`."""
    noise = data.pop("noise", None)
    return Measurement(
        **{**data, "times_s": tuple(data["times_s"])},
        noise=None if noise is None else NoiseCheck(**noise),
    )
