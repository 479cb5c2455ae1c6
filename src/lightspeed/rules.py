"""One vocabulary of bounds and findings, and the rules that decide them.

The profile of a step and the diagnosis of a trace both reduce what they measured to
`StepFacts` (how the step's time splits between its possible causes) and call
`diagnose`, so the same facts give the same bound and the same findings wherever
they come from. Every threshold is defined here once, with its reasoning.

Each fix is bounded by Amdahl's law: removing a part that takes a fraction f of the
step can make the step at most 1 / (1 − f) times faster (`max_speedup`).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence

from lightspeed import units
from lightspeed.dtypes import Precision


class Bound(str, enum.Enum):
    """What limits a piece of work: an op (compute, memory or overhead) or a step."""

    COMPUTE = "compute"  # the math units are the limit: faster kernels are the lever
    MEMORY = "memory"  # moving bytes is the limit (memory-bound ops, copies and sets)
    OVERHEAD = "overhead"  # fixed per-op cost: dispatch, launch, Python between ops
    SYNCHRONIZATION = "synchronization"  # the host waits for the device, over and over
    DATA_LOADING = "data-loading"  # the step waits for its next batch
    COMMUNICATION = "communication"  # collectives that computation does not hide
    UNKNOWN = "unknown"  # nothing to judge by


class FindingKind(str, enum.Enum):
    """What a finding is about: one name per cause, stable across releases."""

    DATA_LOADING = "data-loading"
    SYNCHRONIZATION = "synchronization"
    COMMUNICATION = "communication"  # communication not hidden by computation
    DEVICE_IDLE = "device-idle"  # the device waits for the host to give it work
    HOST_OVERHEAD = "host-overhead"  # the host spends the step on per-op cost, not work
    DEVICE_BUSY = "device-busy"  # the device is busy: faster kernels are the lever
    TENSOR_CORE_SHAPES = "tensor-core-shapes"
    SPEED_OF_LIGHT = "speed-of-light"
    ABOVE_SPEED_OF_LIGHT = "above-speed-of-light"
    COLLECTIVE_WAIT = "collective-wait"
    RANK_SKEW = "rank-skew"
    NOTHING_TO_JUDGE = "nothing-to-judge"  # the window recorded no work at all
    UNKNOWN_FLOPS = "unknown-flops"  # ops with no FLOP formula take time in the step
    MEMORY_FORMAT = "memory-format"  # convolutions in NCHW: channels_last is the lever
    CUDNN_BENCHMARK = "cudnn-benchmark"  # convolutions on cuDNN's heuristic algorithms
    RECURRENT_LAYERS = "recurrent-layers"  # RNNs unfused, or fused far below their SoL

    @property
    def states_its_gain(self) -> bool:
        """Whether the message itself says how much faster the step could be."""
        return self is FindingKind.SPEED_OF_LIGHT


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One thing a report tells the user to look at: a `kind`, a one-line `message`,
    and its `evidence` (numbers in the units their keys name; `max_speedup` where a
    fix is bounded)."""

    kind: FindingKind
    message: str
    evidence: Mapping[str, float | int | str]

    @property
    def max_speedup(self) -> float | None:
        """The most fixing it can speed the step up (None: not bounded)."""
        value = self.evidence.get("max_speedup")
        return float(value) if isinstance(value, (int, float)) else None


# --- Thresholds: shares of the step above which a cause is named. -----------------------

# A quarter of the step waiting on one thing is the point past which fixing it is
# the first lever (at most 1.33× faster); below it, other causes usually weigh more.
DATA_LOADING_SHARE = 0.25
EXPOSED_COMMUNICATION_SHARE = 0.25
DEVICE_IDLE_SHARE = 0.25
# Syncs are named earlier: each also stops the host from queueing work ahead, which
# the time in them understates.
SYNC_SHARE = 0.20
# A step that syncs this often (at least this many times, once per this many ops or
# fewer) never lets the host run ahead of the device, whatever each sync costs.
SYNC_MIN_COUNT = 10
SYNC_OPS_PER_SYNC = 8
# With no device to run ahead, a CPU step's host is its only worker: per-op cost
# bounds it once it outweighs the work itself.
HOST_OVERHEAD_SHARE = 0.5
# Share of the step in matrix products whose shapes tensor cores cannot fully use.
TENSOR_CORE_SHAPES_SHARE = 0.05

# Eager PyTorch spends about 5–10 µs of fixed cost on each op (dispatch on the CPU, a
# kernel launch on a GPU), so an op shorter than 20 µs spends a quarter to half of its
# time on that cost rather than on its work.
SMALL_OP_S = 20e-6
# A small op reaching less than this fraction of its speed of light is held back by
# that fixed cost, not by the roofs.
OVERHEAD_EFFICIENCY = 0.5
# An op measured this much faster than its speed of light is beyond timing noise: the
# ceilings it is compared with are too low. On a shared 2-core guest, the in-cache
# bandwidth of one kernel varied by up to 23 % between calibrations a minute apart
# (docs/benchmarks.md), so smaller excesses are noise.
ABOVE_SOL_TOLERANCE = 0.25
# Ops with no FLOP formula count 0 FLOPs: past this share of the op time, the step's
# FLOPs, MFU and speed of light are understated by more than rounding shows.
UNKNOWN_FLOPS_SHARE = 0.01
# Ranks whose step times, or one rank's wait in collectives, differ by this share of
# the step are reported.
SKEW_SHARE = 0.10

# Share of the step in one kind of layer (convolutions, recurrent layers) past which a
# change to how it runs is named: a tenth is past the timing noise of a shared machine,
# and worth a change of code.
LAYER_SHARE = 0.10
# Layers whose kernels (oneDNN's, cuDNN's) reach less than this fraction of their speed
# of light run far below it; it is also the fraction an estimated gain assumes the
# changed layers reach. Those libraries' convolutions and RNNs reach half their roofs or
# more on shapes that fill the device, so a quarter is a conservative target.
REACHABLE_FRACTION_OF_SOL = 0.25
# A recurrent layer run as a Python loop over timesteps shows, in one module's forward,
# one matrix product and one set of gate activations per timestep: this many or more.
RECURRENT_MIN_STEPS = 8
# Each timestep of a recurrent layer multiplies `batch` rows by its weights: below this
# many rows a product is a sliver that cannot keep the matrix units busy (each weight
# read is used by few rows), so a larger batch is the first lever.
RECURRENT_SMALL_BATCH = 32

# Tensor cores take matmul dimensions in multiples of this many elements: 16 bytes
# (NVIDIA Deep Learning Performance guide, "Matrix Multiplication Background",
# tensor core requirements). Precisions not listed use no tensor cores.
TENSOR_CORE_MULTIPLE: Mapping[Precision, int] = {
    Precision.TF32: 4,
    Precision.FP16: 8,
    Precision.BF16: 8,
    Precision.FP8: 16,
}


def max_speedup(fraction: float) -> float:
    """The most a step can speed up when a part taking `fraction` of it disappears."""
    if fraction >= 1:
        return float("inf")
    return 1 / (1 - max(0.0, fraction))


def speedup(before_s: float | None, after_s: float | None) -> float | None:
    """How many times faster a step of `after_s` seconds is than one of `before_s`
    (a plain step's time over a changed one's; None: either unknown or zero)."""
    return before_s / after_s if before_s and after_s else None


def syncs_dominate(syncs: int, ops: int) -> bool:
    """Whether host syncs are frequent enough to serialize the step (see SYNC_MIN_COUNT)."""
    return syncs >= SYNC_MIN_COUNT and ops <= SYNC_OPS_PER_SYNC * syncs


def unaligned_dims(dims: Mapping[str, int], precision: Precision) -> dict[str, int] | None:
    """The dimensions of a matrix product in `precision` that tensor cores cannot fully
    use (empty: all aligned), or None when `precision` runs on no tensor cores."""
    multiple = TENSOR_CORE_MULTIPLE.get(precision)
    if multiple is None:
        return None
    return {k: v for k, v in dims.items() if v % multiple}


def aligned_batch_sizes(batch_size: int, rows: int, precision: Precision) -> tuple[int, ...] | None:
    """The batch sizes nearest `batch_size` (the next above it, and the one below when
    there is one) that put a product's `rows` (= `batch_size` × rows per sample) on the
    tensor-core multiple of `precision`; None when `rows` is not a multiple of
    `batch_size` or `precision` has no tensor cores."""
    multiple = TENSOR_CORE_MULTIPLE.get(precision)
    if multiple is None or batch_size <= 0 or rows % batch_size:
        return None
    # b × per is a multiple of m exactly when b is a multiple of m / gcd(per, m).
    step = multiple // math.gcd(rows // batch_size, multiple)
    above = (batch_size // step + 1) * step
    below = (batch_size - 1) // step * step
    return (above, below) if below > 0 else (above,)


def padded(dims: Mapping[str, int], precision: Precision) -> dict[str, int]:
    """`dims` rounded up to the tensor-core multiple of `precision`."""
    multiple = TENSOR_CORE_MULTIPLE[precision]
    return {k: math.ceil(v / multiple) * multiple for k, v in dims.items()}


def op_bound(roofline_bound: Bound, time_s: float | None, efficiency: float | None) -> Bound:
    """An op's bound: overhead when it is small and far from its speed of light (see
    SMALL_OP_S), else the side of the ridge its intensity lies on."""
    if (
        time_s is not None
        and time_s < SMALL_OP_S
        and efficiency is not None
        and efficiency < OVERHEAD_EFFICIENCY
    ):
        return Bound.OVERHEAD
    return roofline_bound


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepFacts:
    """How one step's time splits between the causes the rules can name, in seconds.

    `device`: the work runs on an asynchronous device (a GPU) beside the host.
    `sync_cost_s`: what host syncs cost the step (with a device, the idle time they
    cause, copy calls that block the host included; on the CPU alone, the time in
    them). `exposed_communication_s`: communication nothing hides (device collectives
    beside no computation, and the host waiting in collectives). `overhead_s`: with a
    device, the time it idles waiting for the host's per-op work; on the CPU alone,
    time in per-op cost rather than work. `compute_s` and `memory_s`: busy time bound
    by math and by moving bytes. `unaligned_s`: time in matrix products whose shapes
    tensor cores cannot fully use, in `unaligned_precisions`; `unaligned_excess_s`: how
    much of it lies above their speed of light (None: unknown). The rest only details
    the messages.
    """

    step_s: float
    device: bool
    data_loading_s: float = 0.0
    loader_workers: bool | None = None  # the DataLoader has worker processes (None: unknown)
    sync_cost_s: float = 0.0
    blocking_copy_s: float = 0.0  # of sync_cost_s: in copy calls that block the host
    sync_s: float = 0.0
    syncs: int = 0
    ops: int = 0
    exposed_communication_s: float = 0.0
    communication_s: float = 0.0
    overlap_fraction: float | None = None
    host_collective_s: float = 0.0  # of exposed_communication_s: the host in collectives
    overhead_s: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    busy_s: float = 0.0
    unaligned_s: float = 0.0
    unaligned_excess_s: float | None = None
    unaligned_precisions: tuple[Precision, ...] = ()
    # Details for the messages.
    host_wait_s: float | None = None  # device idle waiting for the host, edges included
    edge_idle_s: float | None = None  # before the first or after the last kernel
    launches: int | None = None
    shorter_than_launch: int | None = None
    cpu_per_launch_s: float | None = None
    matmul_fraction_of_sol: float | None = None
    matmul_hardware: str | None = None
    overhead_parts: Mapping[str, float] = dataclasses.field(default_factory=dict)
    unaligned_example: str | None = None
    # The batch size now, and those that would put a misaligned batch × sequence
    # dimension of the products on the multiple (empty: the batch is not the cause).
    batch_size: int | None = None
    aligned_batch_sizes: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """A step's bound and its findings, the largest possible gain first."""

    bound: Bound
    findings: list[Finding]


# The causes a step's bound is named after, in the order they are looked for.
_CAUSES = (
    (FindingKind.DATA_LOADING, Bound.DATA_LOADING),
    (FindingKind.SYNCHRONIZATION, Bound.SYNCHRONIZATION),
    (FindingKind.COMMUNICATION, Bound.COMMUNICATION),
    (FindingKind.DEVICE_IDLE, Bound.OVERHEAD),
    (FindingKind.HOST_OVERHEAD, Bound.OVERHEAD),
)


def diagnose(f: StepFacts, extra: Sequence[Finding] = ()) -> Diagnosis:
    """The bound of the step `f` describes and its findings, with `extra` findings
    (those only one source can make) ranked among them.

    One answer: the finding that names the bound comes first, the others follow by the
    most they could gain, and none contradicts the bound (a busy device's "faster
    kernels" is said only of a compute- or memory-bound step). A window in which nothing
    was recorded names no bound."""
    if f.step_s <= 0 or (f.ops == 0 and f.busy_s == 0 and not f.device):
        return Diagnosis(bound=Bound.UNKNOWN, findings=[_nothing_to_judge(f), *extra])
    causes = (_data_loading(f), _synchronization(f), _communication(f))
    findings = [x for x in causes if x is not None]
    findings += [x for x in (_device_time(f) if f.device else _host_overhead(f),) if x]
    tensor_cores = _tensor_core_shapes(f)
    if tensor_cores is not None:
        findings.append(tensor_cores)
    findings += extra
    findings.sort(key=lambda x: -(x.max_speedup or 1.0))
    named = {x.kind for x in findings}
    cause = next(((kind, b) for kind, b in _CAUSES if kind in named), None)
    if cause is None:
        bound = Bound.MEMORY if f.memory_s > f.compute_s else Bound.COMPUTE
        return Diagnosis(bound=bound, findings=findings)
    kind, bound = cause
    first = [x for x in findings if x.kind is kind]
    rest = [x for x in findings if x.kind is not kind and x.kind is not FindingKind.DEVICE_BUSY]
    return Diagnosis(bound=bound, findings=first + rest)


def _nothing_to_judge(f: StepFacts) -> Finding:
    return Finding(
        kind=FindingKind.NOTHING_TO_JUDGE,
        message=(
            f"the window ({_duration(f.step_s)}) recorded no op and no device work: nothing"
            " to judge; record more or longer steps (observe(active=N), a later schedule)"
        ),
        evidence={"step_s": f.step_s},
    )


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _duration(seconds: float | None) -> str:
    return "—" if seconds is None else units.seconds(seconds)


def _data_loading(f: StepFacts) -> Finding | None:
    share = f.data_loading_s / f.step_s
    if share < DATA_LOADING_SHARE:
        return None
    if f.loader_workers:
        # Workers already run: they do not keep up, so the next knobs are their number
        # and the cost of a sample.
        advice = (
            "its worker processes do not keep up: raise num_workers (up to the free CPU"
            " cores) and prefetch_factor, make each sample cheaper (decode once and cache,"
            " smaller or pre-resized files, augment on the device), or batch the transform"
            " (a collate_fn or a sampler yielding whole batches)"
        )
    else:
        advice = (
            "use num_workers > 0, pin_memory=True, persistent_workers=True and a"
            " prefetch_factor, or move decoding off the training process"
        )
    return Finding(
        kind=FindingKind.DATA_LOADING,
        message=f"the step waits {_pct(share)} of its time for the DataLoader: {advice}",
        evidence={
            "data_loading_s": f.data_loading_s,
            "step_s": f.step_s,
            "max_speedup": max_speedup(share),
        },
    )


def _synchronization(f: StepFacts) -> Finding | None:
    # On a device a sync costs the idle time it causes (the host waiting while the
    # device works costs nothing); on the CPU alone a sync costs nearly nothing but
    # still stops the host from running ahead, so there its frequency decides.
    share = f.sync_cost_s / f.step_s
    dense = not f.device and syncs_dominate(f.syncs, f.ops)
    if share < SYNC_SHARE and not dense:
        return None
    per = f"one per {f.ops / f.syncs:.1f} ops" if f.syncs else "none counted"
    if dense:
        how = f"{f.syncs} host syncs in the step ({per})"
    elif f.device:
        copies = (
            f"; {_duration(f.blocking_copy_s)} of it in memory copy calls that block the"
            " host, as copies to or from pageable memory do: pin that memory"
            " (pin_memory=True) and copy with non_blocking=True"
            if f.blocking_copy_s
            else ""
        )
        how = (
            f"host syncs cost the device {_pct(share)} of the step (the idle time they drain"
            f" it into, and time spent syncing on an idle device; {units.plural(f.syncs, 'sync')},"
            f" {_duration(f.sync_s)} of host time in them{copies})"
        )
    else:
        how = f"{_pct(share)} of the step is spent in host syncs"
    return Finding(
        kind=FindingKind.SYNCHRONIZATION,
        message=(
            f"{how}: each makes the host wait for the device, so neither runs ahead;"
            " keep values on the device (no .item(), .cpu(), print or"
            " torch.cuda.synchronize inside the step) and read them once every N steps"
        ),
        evidence={
            "syncs": f.syncs,
            "ops": f.ops,
            "sync_s": f.sync_s,
            **({"sync_lost_s": f.sync_cost_s} if f.device else {}),
            **({"blocking_copy_s": f.blocking_copy_s} if f.blocking_copy_s else {}),
            "step_s": f.step_s,
            "max_speedup": max_speedup(share),
        },
    )


def _communication(f: StepFacts) -> Finding | None:
    exposed = f.exposed_communication_s / f.step_s
    if exposed < EXPOSED_COMMUNICATION_SHARE:
        return None
    overlap = f.overlap_fraction or 0.0
    if f.device:
        host = (
            f"; {_duration(f.host_collective_s)} of the host waiting in collectives"
            if f.host_collective_s
            else ""
        )
        where = f" ({_pct(overlap)} of the device's overlaps compute{host})"
    else:
        where = f" (the host in collectives for {_duration(f.host_collective_s)})"
    return Finding(
        kind=FindingKind.COMMUNICATION,
        message=(
            f"communication not hidden by computation takes {_pct(exposed)} of the step"
            f"{where}: overlap it (DDP buckets, bucket_cap_mb, gradient_as_bucket_view),"
            " or communicate less often (no_sync during gradient accumulation)"
        ),
        evidence={
            "communication_s": f.communication_s,
            "exposed_s": f.exposed_communication_s,
            "overlap_fraction": overlap,
            "host_collective_s": f.host_collective_s,
            "max_speedup": max_speedup(exposed),
        },
    )


def _device_time(f: StepFacts) -> Finding:
    """The device waits for the host, or it is busy: one of the two is the story."""
    step = f.step_s
    idle = f.overhead_s / step
    if idle >= DEVICE_IDLE_SHARE:
        host_wait = f.overhead_s if f.host_wait_s is None else f.host_wait_s
        details = [f"{units.seconds(v)} {k.replace('_', ' ')}" for k, v in f.overhead_parts.items()]
        if f.edge_idle_s is not None:
            details.append(
                f"{_pct(f.edge_idle_s / step)} before its first or after its last kernel"
            )
        if f.launches is not None:
            details.append(f"{f.launches} launches at {_duration(f.cpu_per_launch_s)} of CPU each")
        detail = f" ({'; '.join(details)})" if details else ""
        return Finding(
            kind=FindingKind.DEVICE_IDLE,
            message=(
                f"the device idles {_pct(idle)} of the step, {_pct(host_wait / step)} of the"
                f" step waiting for the host{detail}: CUDA graphs"
                " (torch.compile mode='reduce-overhead'), fewer and larger kernels"
                " (torch.compile, a larger batch), less Python per step"
            ),
            evidence={
                "idle_s": f.overhead_s,
                "host_wait_s": host_wait,
                **({"launches": f.launches} if f.launches is not None else {}),
                **(
                    {"shorter_than_launch": f.shorter_than_launch}
                    if f.shorter_than_launch is not None
                    else {}
                ),
                **{f"{k}_s": v for k, v in f.overhead_parts.items()},
                "step_s": step,
                "max_speedup": max_speedup(idle),
            },
        )
    sol = f.matmul_fraction_of_sol
    products = (
        f"; its matrix products run at {_pct(sol)} of their speed of light on {f.matmul_hardware}"
        if sol is not None
        else ""
    )
    return Finding(
        kind=FindingKind.DEVICE_BUSY,
        message=(
            f"the device is busy {_pct(f.busy_s / step)} of the step"
            f" ({_pct(f.compute_s / step)} computing{products}): gains now"
            " come from faster kernels (mixed precision, tensor-core shapes, fusion);"
            " `lightspeed profile` shows each op's distance to the roofline"
        ),
        # No bound on the gain: a faster kernel's limit is its speed of light, which
        # only ops with known FLOPs and bytes have.
        evidence={
            "busy_s": f.busy_s,
            "compute_s": f.compute_s,
            "step_s": step,
            **({"matmul_fraction_of_sol": sol} if sol is not None else {}),
        },
    )


def _host_overhead(f: StepFacts) -> Finding | None:
    share = f.overhead_s / f.step_s
    if share < HOST_OVERHEAD_SHARE:
        return None
    parts = "".join(
        f", {units.seconds(v)} {k.replace('_', ' ')}" for k, v in f.overhead_parts.items()
    )
    ops = f"{f.ops} ops; " if f.ops else ""
    return Finding(
        kind=FindingKind.HOST_OVERHEAD,
        message=(
            f"{_pct(share)} of the step is per-op overhead ({ops}time in ops"
            f" under {units.seconds(SMALL_OP_S)} and between ops{parts}): batch more work per"
            " op, or let torch.compile fuse the small ops"
        ),
        evidence={
            "overhead_s": f.overhead_s,
            "ops": f.ops,
            **{f"{k}_s": v for k, v in f.overhead_parts.items()},
            "step_s": f.step_s,
            "max_speedup": max_speedup(share),
        },
    )


_PRECISION_WORDS = {
    Precision.FP16: "16-bit",
    Precision.BF16: "16-bit",
    Precision.TF32: "TF32",
    Precision.FP8: "FP8",
}


def _tensor_core_shapes(f: StepFacts) -> Finding | None:
    share = f.unaligned_s / f.step_s
    if share < TENSOR_CORE_SHAPES_SHARE or not f.unaligned_precisions:
        return None
    needs: dict[str, int] = {}
    for p in sorted(f.unaligned_precisions, key=lambda p: -TENSOR_CORE_MULTIPLE[p]):
        needs.setdefault(_PRECISION_WORDS[p], TENSOR_CORE_MULTIPLE[p])
    what = " or ".join(needs)
    if len(needs) == 1:
        multiples = str(next(iter(needs.values())))
    else:
        multiples = " or ".join(f"{m} ({w})" for w, m in needs.items())
    evidence: dict[str, float | int | str] = {"unaligned_s": f.unaligned_s, "step_s": f.step_s}
    if f.unaligned_excess_s is not None:
        # At best those products would run at their speed of light.
        evidence["max_speedup"] = max_speedup(f.unaligned_excess_s / f.step_s)
    if f.unaligned_example is not None:
        evidence["example"] = f.unaligned_example
    batch = ""
    if f.aligned_batch_sizes:
        sizes = " or ".join(str(b) for b in f.aligned_batch_sizes)
        batch = (
            f"; their batch × sequence rows are off the multiple: a batch of {sizes}"
            f" (now {f.batch_size}) puts them on it"
        )
        evidence["aligned_batch_size"] = f.aligned_batch_sizes[0]
    return Finding(
        kind=FindingKind.TENSOR_CORE_SHAPES,
        message=(
            f"{_pct(share)} of the step runs {what} matrix products with a dimension that"
            f" is not a multiple of {multiples}, which tensor cores cannot fully use:"
            " pad the hidden size, vocabulary and batch × sequence length to multiples"
            f" of {max(needs.values())} (64 is better)"
            + (f"; for example {f.unaligned_example}" if f.unaligned_example else "")
            + batch
        ),
        evidence=evidence,
    )
