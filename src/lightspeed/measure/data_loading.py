"""A training loop fed by a workload's own loader, timed apart: the wait for each batch
and the step that consumes it.

Unlike every other measurement here, the batch is not made once and reused: each step
takes the loader's next batch, as a real training loop does, so the time the step
waits for its data is measured, not assumed. When the loader runs out (an epoch ends)
a new epoch starts inside the measurement, with whatever that costs under the options
(workers starting again unless persistent).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Generator, Iterable, Iterator
from typing import Any

import torch

from lightspeed.errors import ConfigError, WorkloadError
from lightspeed.facts.tuning import LoaderOptions, LoaderRun
from lightspeed.measure.device import require, torch_dtype
from lightspeed.measure.step import PreparedStep, guard, to_device
from lightspeed.workload import Workload
from lightspeed.workload.tensor_walk import tensors_in

__all__ = ["batches", "build_loader", "queued", "step_on", "time_loader"]


def build_loader(workload: Workload, options: LoaderOptions) -> Iterable[Any]:
    """`workload.loader(batch_size, **options)`; a ConfigError when it has none."""
    if workload.loader is None:
        raise ConfigError(
            f"workload {workload.name!r} has no data loader: give it"
            " loader=lambda batch_size, **options: DataLoader(dataset, batch_size, **options)."
        )
    with guard(workload, f"loader(batch_size, {options.label})"), _many_workers_meant():
        return workload.loader(workload.batch_size, **options.kwargs())


@contextlib.contextmanager
def _many_workers_meant() -> Iterator[None]:
    """DataLoader's warning about more workers than cores silenced: trying more is what a
    search for the best number does, and it measures what they cost."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        yield


def batches(workload: Workload, loader: Iterable[Any]) -> Generator[Any, None, None]:
    """The loader's batches without end: a new epoch whenever one ends. A WorkloadError
    when an epoch yields nothing."""
    while True:
        empty = True
        with guard(workload, "iter(loader)"), _many_workers_meant():
            epoch = iter(loader)
        while True:
            with guard(workload, "the loader's next batch"):
                try:
                    batch = next(epoch)
                except StopIteration:
                    break
            empty = False
            yield batch
        if empty:
            raise WorkloadError(f"workload {workload.name!r}: its loader yields no batch.")


def queued(options: LoaderOptions) -> int:
    """Steps to run untimed after the first batch: twice the batches the workers queue
    while they start (none without workers)."""
    return 2 * options.num_workers * (options.prefetch_factor or 2)


def step_on(prepared: PreparedStep, raw: Any) -> None:
    """One training step of `prepared` on `raw`, a batch as the loader yields it (moved
    to the step's device first); returns once the device is done."""
    settings = prepared.settings
    prepared.batch = to_device(raw, require(settings.device), torch_dtype(settings.dtype.stored))
    prepared.step()
    prepared.sync()


def time_loader(
    prepared: PreparedStep,
    options: LoaderOptions,
    *,
    steps: int,
    threads: int | None = None,
    predicted_loop_s: float | None = None,
) -> LoaderRun:
    """`steps` training steps of `prepared`, each on the next batch of its workload's
    loader built with `options`, after one step on the first batch (which pays for the
    workers starting) and untimed steps on the batches the workers queued meanwhile
    (twice as many as they queue). The step runs on `threads` CPU threads (None: as many as now).
    Times in seconds, wall clock, the device synchronised after each step."""
    if steps < 1:
        raise ConfigError(f"time_loader: steps {steps} must be at least 1.")
    workload = prepared.workload
    before = torch.get_num_threads()
    loader = build_loader(workload, options)
    feed = batches(workload, loader)
    wait = compute = 0.0
    samples = 0
    try:
        torch.set_num_threads(threads or before)
        start = time.perf_counter()
        raw = next(feed)
        first_batch_s = time.perf_counter() - start
        step_on(prepared, raw)
        # The batches the workers made while starting are drained untimed: a loop's
        # pace is set once it takes them as fast as they are made.
        for _ in range(queued(options)):
            step_on(prepared, next(feed))
        for _ in range(steps):
            start = time.perf_counter()
            raw = next(feed)
            got = time.perf_counter()
            step_on(prepared, raw)
            done = time.perf_counter()
            wait += got - start
            compute += done - got
            samples += _samples(raw, workload.batch_size)
    finally:
        # Worker processes end with the loader, not with the interpreter.
        with contextlib.suppress(Exception):
            feed.close()
        del loader
        torch.set_num_threads(before)
    loop = wait + compute
    return LoaderRun(
        options=options,
        threads=threads or before,
        steps=steps,
        first_batch_s=first_batch_s,
        wait_s=wait / steps,
        compute_s=compute / steps,
        loop_s=loop / steps,
        samples_per_s=samples / loop if loop > 0 else 0.0,
        predicted_loop_s=predicted_loop_s,
    )


def _samples(batch: Any, default: int) -> int:
    """The samples in `batch`: the first dimension of its first tensor (a last batch
    may be short), else `default`."""
    first = next(tensors_in(batch), None)
    return int(first.shape[0]) if first is not None and first.dim() > 0 else default
