"""`lightspeed time TARGET`: the median step time and throughput of a workload."""

from __future__ import annotations

from pathlib import Path

import typer

from lightspeed.cli.common import (
    BatchSizeOption,
    BudgetOption,
    DeviceOption,
    DtypeOption,
    HardwareOption,
    JsonOption,
    TargetArgument,
    ThreadsOption,
    report,
    use_threads,
)


def time_command(
    target: str = TargetArgument,
    device: str = DeviceOption,
    dtype: str = DtypeOption,
    batch_size: int | None = BatchSizeOption,
    hardware: str | None = HardwareOption,
    warmup: int = typer.Option(
        3,
        "--warmup",
        metavar="STEPS",
        help="Untimed steps before timing, at least; the warm-up goes on until the step"
        " time stops falling (at most 15 s).",
    ),
    budget: float = BudgetOption,
    threads: int | None = ThreadsOption,
    min_replicates: int = typer.Option(
        5, "--min-replicates", metavar="N", help="Fewest timed blocks."
    ),
    nproc: int | None = typer.Option(
        None,
        "--nproc",
        metavar="N",
        help="Run the step in N processes under torchrun with DistributedDataParallel (gloo"
        " on a CPU, NCCL on GPUs), each at the batch size (per device) and --threads"
        " threads (default: the cores shared among them); reports the slowest process's"
        " step and the samples/s of all.",
    ),
    json_path: Path | None = JsonOption,
) -> None:
    """Time a workload's training step: median with IQR, samples/s, tokens/s where known."""
    from lightspeed.measure.timer import TimerConfig
    from lightspeed.workflows.profile import run_setup

    if nproc is None:
        use_threads(threads)
    workload, settings, hw = run_setup(target, device, dtype, batch_size, hardware)
    config = TimerConfig(warmup_steps=warmup, budget_s=budget, min_replicates=min_replicates)
    if nproc is not None:
        from lightspeed.measure.distributed.ddp_timing import time_data_parallel
        from lightspeed.report.data_parallel_report import data_parallel_timing_document

        run = time_data_parallel(target, workload, settings, nproc, config=config, threads=threads)
        doc = data_parallel_timing_document(
            run.timing,
            hw,
            processes=run.processes,
            per_device_batch=run.per_device_batch,
            threads=run.threads,
            backend=run.backend,
        )
        report(doc, json_path)
        return
    from lightspeed.measure.workload_timing import time_workload
    from lightspeed.report.timing_report import timing_document

    timing = time_workload(workload, settings, config)
    report(timing_document(timing, hw), json_path)
