"""One process's step predicted in N-way data parallel (DistributedDataParallel).

The profile is one process's step at its per-device batch. Each of N processes runs
that step on its own batch, and DDP averages the gradients with an all-reduce per
bucket while backward still runs (PyTorch's DDP paper, Li et al., VLDB 2020, §3.2):

- the gradients, S bytes (`MemoryBreakdown.gradients_bytes`; without a memory
  breakdown, the parameters at the step's precision), fill buckets in reverse
  parameter order: a first bucket of `FIRST_BUCKET_BYTES` (torch's
  `_DEFAULT_FIRST_BUCKET_BYTES`), then buckets of `bucket_bytes` (`bucket_cap_mb`), the
  last holding the rest. A profile does not keep each parameter's size, so buckets are
  these equal sizes, not cut at parameter boundaries;
- gradients become ready at an even rate over backward, the backward ops' share of
  the measured step: bucket k is ready once backward has produced all bytes up to its
  end;
- a ring all-reduce of b bytes over n processes takes
  2(n−1)/n · b / bandwidth + 2(n−1) · latency (reduce-scatter then all-gather, each
  n−1 steps of b/n bytes on a one-way link);
- all-reduces run one at a time in bucket order, each starting when its bucket is ready
  and the one before has ended;
- the step grows by the communication left after backward ends:
  exposed = max(0, end of the last all-reduce − end of backward). The rest of the step
  (forward, optimizer, the time outside ops) is the same in every process;
- processes that share one machine's cores, caches and memory (CPU processes, or
  oversubscribed cores) each compute slower than one alone: `compute_slowdown` (1.0,
  each process on a device of its own, as with GPUs) multiplies the step, backward
  included, before the communication is laid over it. It is a property of the machine
  and the process count, measured or fitted apart from the step predicted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from lightspeed import units
from lightspeed.analysis.step_roofline import analyse_ops
from lightspeed.dtypes import ELEMENT_BYTES
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.link import CoRun, Link
from lightspeed.facts.profile import Prediction, Profile
from lightspeed.facts.records import Phase
from lightspeed.rules import Bound

# torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES: DDP's first bucket is small so that
# communication starts early in backward.
FIRST_BUCKET_BYTES = 2**20
# DistributedDataParallel's default bucket_cap_mb (25 MiB).
DEFAULT_BUCKET_BYTES = 25 * 2**20

RULES = (
    "gradients in buckets, in reverse parameter order: the first of 1 MiB, then of the"
    " bucket size, the last holding the rest",
    "a bucket is ready when backward has produced its gradients, at an even rate over the"
    " backward ops' share of the step",
    "ring all-reduce of b bytes over n processes: 2(n−1)/n · b / bandwidth + 2(n−1) · latency",
    "all-reduces run one at a time in bucket order, overlapping the rest of backward",
    "step time: the measured step × the compute slowdown of processes sharing a machine,"
    " plus the communication still running when backward ends",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Communication:
    """The gradient all-reduces of one data-parallel step.

    `buckets_bytes`: each bucket's size, in the order they are reduced. `backward_s`: the
    backward phase's seconds within the step. `all_reduce_s`: every all-reduce's
    seconds summed. `exposed_s`: seconds of communication after backward ends, which
    the step grows by.
    """

    gradient_bytes: int
    buckets_bytes: tuple[int, ...]
    backward_s: float
    all_reduce_s: float
    exposed_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScalingRow:
    """One process count of a scaling table: the step each process runs, in seconds,
    samples per second over all processes, and the efficiency: that throughput over
    `processes` times one process's throughput (1.0 is perfect scaling)."""

    processes: int
    per_device_batch: int
    step_time_s: float
    samples_per_s: float
    efficiency: float


def ring_all_reduce_s(nbytes: float, processes: int, link: Link) -> float:
    """Seconds for a ring all-reduce of `nbytes` bytes over `processes` processes on
    `link` (0 for one process)."""
    if processes < 1:
        raise ConfigError(f"--nproc {processes} must be at least 1.")
    n = processes
    return 2 * (n - 1) / n * nbytes / link.bandwidth_bytes_per_s + 2 * (n - 1) * link.latency_s


def bucket_sizes(
    gradient_bytes: int,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    first_bucket_bytes: int = FIRST_BUCKET_BYTES,
) -> tuple[int, ...]:
    """The sizes, in bytes, of the buckets DDP reduces `gradient_bytes` in, in order."""
    if bucket_bytes < 1:
        raise ConfigError(f"the bucket size {bucket_bytes} B must be at least 1 byte.")
    if gradient_bytes <= 0:
        return ()
    first = min(first_bucket_bytes, gradient_bytes)
    rest = gradient_bytes - first
    full, last = divmod(rest, bucket_bytes)
    return (first, *([bucket_bytes] * full), *([last] if last else []))


def exposed_communication_s(
    buckets_bytes: Sequence[int], backward_s: float, processes: int, link: Link
) -> float:
    """Seconds the all-reduces of `buckets_bytes` run past the end of a backward pass
    of `backward_s` seconds that makes their gradients at an even rate."""
    total = sum(buckets_bytes)
    if total == 0 or processes == 1:
        return 0.0
    ready = end = 0.0
    for size in buckets_bytes:
        ready += backward_s * size / total
        end = max(end, ready) + ring_all_reduce_s(size, processes, link)
    return max(0.0, end - backward_s)


def communication(
    profile: Profile,
    processes: int,
    link: Link,
    *,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    compute_slowdown: float = 1.0,
) -> Communication:
    """The gradient all-reduces of `profile`'s step run in `processes` processes on
    `link`, backward taking `compute_slowdown` times its measured seconds (see the
    module's docstring)."""
    _check_slowdown(compute_slowdown)
    gradients = gradient_bytes(profile)
    buckets = bucket_sizes(gradients, bucket_bytes)
    backward = backward_s(profile) * compute_slowdown
    return Communication(
        gradient_bytes=gradients,
        buckets_bytes=buckets,
        backward_s=backward,
        all_reduce_s=sum(ring_all_reduce_s(b, processes, link) for b in buckets),
        exposed_s=exposed_communication_s(buckets, backward, processes, link),
    )


def gradient_bytes(profile: Profile) -> int:
    """Bytes of gradients a step all-reduces: the memory breakdown's, or else the
    parameters at the step's precision (0 when neither is known)."""
    if profile.memory is not None and profile.memory.gradients_bytes > 0:
        return profile.memory.gradients_bytes
    count = profile.workload.parameter_count or 0
    return count * ELEMENT_BYTES[profile.workload.precision]


def backward_s(profile: Profile) -> float:
    """Seconds of the measured step spent in backward: the backward ops' share of the
    profiled step, applied to the median step time (0 when ops were not timed)."""
    step = profile.step_time_s
    timed = [op for op in profile.ops if op.time_s is not None]
    if step is None or not timed:
        return 0.0
    backward = sum(op.time_s or 0.0 for op in timed if op.phase is Phase.BACKWARD)
    profiled = profile.profiled_step_s or (
        sum(op.time_s or 0.0 for op in timed) + (profile.unattributed_s or 0.0)
    )
    return step * min(1.0, backward / profiled) if profiled > 0 else 0.0


def on_data_parallel(
    profile: Profile,
    processes: int,
    link: Link,
    *,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    compute_slowdown: float = 1.0,
) -> Profile:
    """`profile` (one process's step at its per-device batch) predicted as each process's
    step in `processes`-way data parallel over `link`: its step time, in seconds, times
    `compute_slowdown` (processes sharing one machine) plus the exposed communication.
    One process with no slowdown is the identity but for the record of the prediction.
    The workload keeps its per-device batch size."""
    comm = communication(
        profile, processes, link, bucket_bytes=bucket_bytes, compute_slowdown=compute_slowdown
    )
    timing = profile.timing
    step = profile.step_time_s
    if timing is not None and step:
        scale = (step * compute_slowdown + comm.exposed_s) / step
        timing = dataclasses.replace(timing, times_s=tuple(t * scale for t in timing.times_s))
    return dataclasses.replace(
        profile,
        timing=timing,
        prediction=Prediction(
            changes={"dp": str(processes), "link": link.id},
            source_hardware=profile.hardware.id,
            measured_step_time_s=step,
            rules=RULES,
            assumptions=_assumptions(
                profile, processes, comm, link, bucket_bytes, compute_slowdown
            ),
        ),
    )


def scaling_table(
    profile: Profile | Callable[[int], Profile],
    process_counts: Sequence[int],
    link: Link,
    *,
    global_batch: int | None = None,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    compute_slowdown: Callable[[int], float] | None = None,
) -> tuple[ScalingRow, ...]:
    """Predicted step time, throughput (samples/s) and efficiency for each process count.

    Weak scaling (`global_batch` None): every process runs `profile`'s per-device batch.
    Strong scaling: `global_batch` samples split evenly, so `profile` must be a callable
    `at_batch(per_device_batch) -> Profile` (the batch-size prediction), and one process
    at the whole `global_batch` is the baseline of the efficiency.
    `compute_slowdown(processes)`: each count's slowdown of processes sharing a machine
    (None: 1.0, a device each).
    """
    if global_batch is None:
        at_batch = _fixed(profile)
        batch_of = {n: _batch(profile) for n in process_counts}
        baseline = _throughput(at_batch(batch_of[process_counts[0]] if process_counts else 1))
    else:
        if isinstance(profile, Profile):
            raise ConfigError(
                "strong scaling needs the step at every per-device batch: pass a callable"
                " at_batch(per_device_batch) -> Profile."
            )
        at_batch = profile
        for n in process_counts:
            if global_batch % n:
                raise ConfigError(
                    f"a global batch of {global_batch} does not split evenly over {n} processes."
                )
        batch_of = {n: global_batch // n for n in process_counts}
        baseline = _throughput(at_batch(global_batch))
    rows = []
    for n in process_counts:
        predicted = on_data_parallel(
            at_batch(batch_of[n]),
            n,
            link,
            bucket_bytes=bucket_bytes,
            compute_slowdown=1.0 if compute_slowdown is None else compute_slowdown(n),
        )
        step = _step(predicted)
        samples_per_s = n * batch_of[n] / step
        rows.append(
            ScalingRow(
                processes=n,
                per_device_batch=batch_of[n],
                step_time_s=step,
                samples_per_s=samples_per_s,
                efficiency=samples_per_s / (n * baseline),
            )
        )
    return tuple(rows)


def _fixed(profile: Profile | Callable[[int], Profile]) -> Callable[[int], Profile]:
    if isinstance(profile, Profile):
        return lambda _batch: profile
    return profile


def _batch(profile: Profile | Callable[[int], Profile]) -> int:
    if not isinstance(profile, Profile):
        raise ConfigError("weak scaling needs the one-process Profile at its per-device batch.")
    return profile.workload.batch_size


def _step(profile: Profile) -> float:
    step = profile.step_time_s
    if not step:
        raise ConfigError(f"the profile of {profile.workload.name!r} has no measured step time.")
    return step


def _throughput(profile: Profile) -> float:
    return profile.workload.batch_size / _step(profile)


def corun_slowdown(profile: Profile, corun: CoRun) -> float:
    """How much slower `profile`'s step runs in a process beside `corun.processes − 1`
    others on its machine: each op's time × the co-run slowdown of its bound (compute,
    memory; overhead for ops bound by their per-op cost, ops that move nothing and the
    time outside ops), over the step's time; at least 1.0."""
    weighted = total = 0.0
    factor: dict[Bound | None, float] = {Bound.COMPUTE: corun.compute, Bound.MEMORY: corun.memory}
    for analysis in analyse_ops(profile):
        time = analysis.op.time_s or 0.0
        weighted += time * factor.get(analysis.bound, corun.overhead)
        total += time
    outside = profile.unattributed_s or 0.0
    weighted += outside * corun.overhead
    total += outside
    return max(1.0, weighted / total) if total > 0 else 1.0


def _check_slowdown(compute_slowdown: float) -> None:
    if not compute_slowdown >= 1.0:
        raise ConfigError(
            f"a compute slowdown of {compute_slowdown} must be 1.0 (no sharing) or more."
        )


def _assumptions(
    profile: Profile,
    processes: int,
    comm: Communication,
    link: Link,
    bucket_bytes: int,
    compute_slowdown: float,
) -> tuple[str, ...]:
    """What the prediction takes for granted that a reader should know."""
    said = [
        f"{units.size(comm.gradient_bytes)} of gradients in {len(comm.buckets_bytes)}"
        f" buckets (cap {units.size(bucket_bytes)}), equal sizes rather than cut at"
        " parameter boundaries",
        f"the link: {units.byte_rate(link.bandwidth_bytes_per_s)} each way,"
        f" {units.seconds(link.latency_s)} a message ({link.name})",
        "every process runs at the measured one-process speed: the links, memory and cores"
        " one process used are not shared with the others"
        if compute_slowdown == 1.0
        else f"every process computes {compute_slowdown:.2f}× slower than one alone: the"
        " processes share one machine's cores, caches and memory bandwidth",
        "DDP's copies of gradients into and out of its buckets, and its second copy of the"
        " gradients in memory, are not counted",
    ]
    if not any(op.time_s is not None for op in profile.ops):
        said.append("ops were not timed: no overlap with backward, all communication exposed")
    if profile.memory is None:
        said.append("no memory breakdown: gradients taken as the parameters' bytes")
    if profile.workload.device is Device.CPU and processes > 1:
        said.append(
            "on a CPU, gloo's threads burn CPU time of their own in every all-reduce (0.7 to"
            " 4.7 ms a step measured for 0.1 to 2.7 MiB of gradients), which the ring over"
            " the link does not count: where the processes' threads outnumber the cores,"
            " they share the step's cores, and the step is longer than predicted"
            " (docs/benchmarks.md: 2 processes of 1 thread on 2 cores, 33 % short)"
        )
    return tuple(said)
