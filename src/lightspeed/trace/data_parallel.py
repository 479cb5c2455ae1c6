"""Data-parallel communication inserted into a one-process GPU trace (Daydream's DDP
transformation): each step's gradients, in the buckets DistributedDataParallel reduces
them in, all-reduced over a catalog link while backward still runs.

- **Gradients.** Each `torch::autograd::AccumulateGrad` op of a step (traced with
  `record_shapes=True`) accumulates one parameter's gradient: its recorded shape and type
  give the bytes. Its end is when backward has that gradient.
- **Buckets.** In the order the gradients are ready (DDP rebuilds its buckets in that
  order after the first step), a bucket closes once it holds at least its cap: the first
  `FIRST_BUCKET_BYTES`, the others `bucket_bytes` (`bucket_cap_mb`), the last holding the
  rest (`predict.data_parallel` holds the same constants).
- **All-reduces.** Each bucket's ring all-reduce (`predict.data_parallel.ring_all_reduce_s`)
  runs on a stream of its own, one after another, launched when its last gradient is
  accumulated, once the device work the backward thread launched before has ended; the
  first device task launched after the step's last accumulation waits for them all, as
  DDP's end of backward makes the compute stream wait for its work (`dependency.Inserted`).

Left out: the copies of gradients into the buckets and DDP's own host time.
"""

from __future__ import annotations

import bisect
import dataclasses
import math

from lightspeed.errors import ConfigError
from lightspeed.facts.link import Link
from lightspeed.predict.data_parallel import (
    DEFAULT_BUCKET_BYTES,
    FIRST_BUCKET_BYTES,
    ring_all_reduce_s,
)
from lightspeed.trace.dependency import Inserted
from lightspeed.trace.events import Kind, Trace
from lightspeed.trace.matmuls import KINETO_TYPES
from lightspeed.trace.steps import step_windows

__all__ = ["Bucket", "all_reduces", "gradient_buckets"]

ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


@dataclasses.dataclass(frozen=True)
class Bucket:
    """One bucket of a step's gradients: how many, their bytes, and when the last of them
    was accumulated (traced µs) on thread `tid`."""

    step: int
    gradients: int
    nbytes: int
    ready_us: float
    tid: int


def _gradient_bytes(dims: object, types: object) -> int | None:
    """The bytes of the gradient an AccumulateGrad with these `Input Dims` and `Input
    type` accumulates; None where they do not say."""
    try:
        shape = dims[0]  # type: ignore[index]
        _, size = KINETO_TYPES[types[0]]  # type: ignore[index]
    except (TypeError, IndexError, KeyError):
        return None
    if not isinstance(shape, list) or not all(type(v) is int and v >= 0 for v in shape):
        return None
    return math.prod(shape) * size


def gradient_buckets(
    trace: Trace,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    first_bucket_bytes: int = FIRST_BUCKET_BYTES,
) -> list[Bucket]:
    """Each step's gradient buckets, in the order they are reduced (see the module's
    docstring). Empty when the trace records no gradient's size."""
    if bucket_bytes < 1:
        raise ConfigError(f"the bucket size {bucket_bytes} B must be at least 1 byte.")
    if Kind.CPU_OP not in trace.tables:
        return []
    ops = trace.table(Kind.CPU_OP)
    grads = sorted(
        (float(ops.end_us[row]), int(ops.tid[row]), nbytes)
        for row, (dims, types) in trace.op_shapes.items()
        if trace.names[ops.name[row]] == ACCUMULATE_GRAD
        and (nbytes := _gradient_bytes(dims, types)) is not None
    )
    ends = [g[0] for g in grads]
    buckets: list[Bucket] = []
    for window in step_windows(trace):
        assert window.number is not None
        lo = bisect.bisect_left(ends, window.start_us)
        mine = grads[lo : bisect.bisect_left(ends, window.end_us, lo)]
        held = count = 0
        cap = first_bucket_bytes
        for i, (end, tid, nbytes) in enumerate(mine):
            held += nbytes
            count += 1
            if held >= cap or i == len(mine) - 1:
                buckets.append(Bucket(window.number, count, held, end, tid))
                held = count = 0
                cap = bucket_bytes
    return buckets


def all_reduces(buckets: list[Bucket], processes: int, link: Link) -> list[Inserted]:
    """The all-reduces of `buckets` over `processes` processes on `link`, as tasks to
    insert into the trace's graph: each step's joined at its last bucket's readiness."""
    last: dict[int, float] = {}
    for b in buckets:
        last[b.step] = max(last.get(b.step, b.ready_us), b.ready_us)
    return [
        Inserted(
            at_us=b.ready_us,
            tid=b.tid,
            duration_us=ring_all_reduce_s(b.nbytes, processes, link) * 1e6,
            joined_at_us=last[b.step],
        )
        for b in buckets
    ]
