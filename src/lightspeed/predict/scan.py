"""What an `nn.RNN`'s backward costs as a parallel scan (BPPSA) against autograd's, on a
given device, before it is run (`lightspeed.optimize.scan_backward` runs it).

Both are counted kernel by kernel and each kernel placed on the device's roofline:

- **ordinary backward**: T dependent steps, each the hidden state's gradient through
  W_hh, W_hh's gradient and the pointwise work (six kernels a step, as ATen's cell runs
  it: the activation's backward, two products, the bias's sum, two adds); the steps
  cannot overlap, so each kernel takes at least `per_kernel_s` (the device's per-op
  overhead: dispatch on a CPU, a launch or a dependent small product's latency on a
  GPU). The input's and W_ih's gradients are one product each over all steps (ATen
  hoists the input projection out of the recurrence), on both sides;
- **the scan**: the Jacobians' build (T × B transposed Jacobians of H × H), the up-sweep's
  ⌈log₂(T + 1)⌉ levels of batched H × H by H × H compositions (and their vectors), the
  down-sweep's as many levels of matrix–vector products, then the parameters' gradients
  as single contractions over all steps. Each level is one batched kernel.

Besides these kernels, each side dispatches ops that move no data worth counting: views,
transposes, the scan's slicing and padding, the engine's gradient adds. Each costs at
least one op's overhead too, so each side ends with an "other ops" entry: the ops it
dispatches (`autograd_ops`, `scan_ops`: counted by dispatch and tested against the pinned
torch) less the kernels above. On a CPU every op pays its dispatch; on a GPU the scan's
ops are bound by their launches, while autograd's backward there is cuDNN's fused kernel,
which this count does not describe (`on_scan_backward` keeps its measured time).

The up-sweep does about H times the ordinary backward's FLOPs (dense Jacobians), so at
the speed of light alone the scan is never faster: it wins where the T dependent steps
are bound by per-kernel overhead, which `per_kernel_s` carries. The FLOPs count what
`scan_backward` computes (a multiply-add as two); the bytes are each kernel's operands
and result moved once; the times are bounds at the roofline plus the overhead given.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from lightspeed.analysis.roofline import place_on
from lightspeed.dtypes import ELEMENT_BYTES, Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Prediction, Profile, ScannedBackward
from lightspeed.facts.records import Phase
from lightspeed.predict.carry import scaled_step

__all__ = [
    "RnnShape",
    "ScanKernel",
    "ScanPrediction",
    "autograd_ops",
    "on_scan_backward",
    "predict_scan",
    "scan_levels",
    "scan_ops",
]


# Ops one backward dispatches, views included, for a one-layer RNN with biases and a loss
# at every step (ATen's step-by-step backward; `scan_backward`'s scan). Counted by a
# dispatch mode under torch 2.13; tests/optimize/test_scan_backward.py checks them.
_AUTOGRAD_OPS_PER_STEP = 14
_AUTOGRAD_OPS_ONCE = 9
_SCAN_OPS_PER_LEVEL = 21
_SCAN_OPS_ONCE = 96


def autograd_ops(steps: int) -> int:
    """The ops autograd's backward of a one-layer `nn.RNN` (biases, a loss at every step)
    dispatches over `steps` time steps on a CPU, views included."""
    return _AUTOGRAD_OPS_PER_STEP * steps + _AUTOGRAD_OPS_ONCE


def scan_ops(steps: int) -> int:
    """The ops `scan_backward`'s backward dispatches over `steps` (≥ 2) time steps,
    views included."""
    return _SCAN_OPS_PER_LEVEL * scan_levels(steps) + _SCAN_OPS_ONCE


def scan_levels(steps: int) -> int:
    """The levels of the scan over `steps` time steps: 2⌈log₂(steps + 1)⌉ (up-sweep and
    down-sweep over the seed and the `steps` Jacobians)."""
    if steps < 1:
        raise ValueError(f"a recurrence of {steps} steps has no backward to scan")
    return 2 * math.ceil(math.log2(steps + 1))


@dataclasses.dataclass(frozen=True)
class ScanKernel:
    """One kernel of a backward: what it is, its FLOPs and bytes moved, how many run in a
    row (`count`), and each one's time at the roofline plus the per-kernel overhead, in
    seconds."""

    name: str
    flops: float
    bytes: float
    count: int
    seconds_each: float

    @property
    def seconds(self) -> float:
        return self.count * self.seconds_each


@dataclasses.dataclass(frozen=True)
class ScanPrediction:
    """An RNN's backward predicted both ways on `hardware`: the scan's levels, each
    side's kernels and FLOPs, and their predicted seconds."""

    steps: int
    batch: int
    hidden: int
    input_size: int
    precision: str
    hardware: str
    per_kernel_s: float
    levels: int
    scan: tuple[ScanKernel, ...]
    ordinary: tuple[ScanKernel, ...]

    @property
    def scan_s(self) -> float:
        return sum(k.seconds for k in self.scan)

    @property
    def ordinary_s(self) -> float:
        return sum(k.seconds for k in self.ordinary)

    @property
    def scan_flops(self) -> float:
        return sum(k.flops * k.count for k in self.scan)

    @property
    def ordinary_flops(self) -> float:
        return sum(k.flops * k.count for k in self.ordinary)

    @property
    def work_ratio(self) -> float:
        """The scan's FLOPs over the ordinary backward's."""
        return self.scan_flops / self.ordinary_flops

    @property
    def speedup(self) -> float:
        """The ordinary backward's predicted time over the scan's (> 1: the scan wins)."""
        return self.ordinary_s / self.scan_s


def predict_scan(
    steps: int,
    batch: int,
    hidden: int,
    input_size: int,
    hardware: Hardware,
    *,
    precision: Precision = Precision.FP32,
    per_kernel_s: float = 0.0,
) -> ScanPrediction:
    """The backward of a one-layer `nn.RNN` over `steps` time steps of `batch` samples,
    `input_size` inputs and `hidden` units, as autograd runs it and as `scan_backward`
    does, each kernel at its speed of light on `hardware` in `precision` and at least
    `per_kernel_s` seconds."""
    if min(steps, batch, hidden, input_size) < 1:
        raise ValueError(
            f"an RNN of {steps} steps, batch {batch}, {hidden} hidden and {input_size}"
            " inputs has no backward"
        )
    if per_kernel_s < 0:
        raise ValueError(f"per_kernel_s {per_kernel_s} must be 0 or more")
    size = ELEMENT_BYTES[precision]
    t, b, h, i = steps, batch, hidden, input_size
    n = 1 << math.ceil(math.log2(t + 1))  # the scanned elements, padded

    def kernel(
        name: str, flops: float, moved: float, count: int = 1, *, matrix: bool = True
    ) -> ScanKernel:
        sol = place_on(hardware, flops, moved, precision, matrix=matrix).sol_time_s
        return ScanKernel(name, flops, moved, count, max(sol, per_kernel_s))

    # Both sides share what is done once over all steps: the input's and W_ih's
    # gradients (ATen hoists the input projection out of the recurrence).
    once = (
        kernel(
            "input gradient (δ·W_ih), all steps",
            2 * t * b * h * i,
            (t * b * (h + i) + h * i) * size,
        ),
        kernel(
            "W_ih gradient (δᵀ·x), all steps", 2 * t * b * h * i, (t * b * (h + i) + h * i) * size
        ),
    )
    ordinary: tuple[ScanKernel, ...] = (
        kernel("activation backward", b * h, 3 * b * h * size, t, matrix=False),
        kernel("hidden gradient (δ·W_hh)", 2 * b * h * h, (2 * b * h + h * h) * size, t),
        kernel(
            "W_hh gradient (δᵀ·h), accumulated", 2 * b * h * h, (2 * b * h + 2 * h * h) * size, t
        ),
        kernel("bias gradient", b * h, (b * h + h) * size, t, matrix=False),
        kernel("adds into the state's gradient", 2 * b * h, 6 * b * h * size, 2 * t, matrix=False),
        *once,
    )
    levels = scan_levels(t)
    scan = [
        kernel(
            "σ′ and the Jacobians (W_hhᵀ·diag σ′)",
            t * b * h * (h + 2),
            (2 * t * b * h + n * b * h * h) * size,
            matrix=False,
        ),
    ]
    for d in range(levels // 2):
        pairs = n >> (d + 1)
        scan.append(
            kernel(
                f"up-sweep level {d + 1}",
                pairs * b * (2 * h**3 + 2 * h * h + h),
                pairs * b * (3 * h * h + 3 * h) * size,
            )
        )
    for d in reversed(range(levels // 2)):
        pairs = n >> (d + 1)
        scan.append(
            kernel(
                f"down-sweep level {levels // 2 - d}",
                pairs * b * (2 * h * h + h),
                pairs * b * (h * h + 4 * h) * size,
            )
        )
    scan += [
        kernel("δ = g ⊙ σ′", t * b * h, 3 * t * b * h * size, matrix=False),
        kernel(
            "W_hh gradient (δᵀ·h), all steps", 2 * t * b * h * h, (2 * t * b * h + h * h) * size
        ),
        kernel("bias gradient, all steps", t * b * h, (t * b * h + h) * size, matrix=False),
        *once,
    ]

    def other(kernels: Sequence[ScanKernel], dispatched: int) -> ScanKernel:
        return ScanKernel(
            "other ops (views, copies, the engine's adds)",
            0.0,
            0.0,
            max(dispatched - sum(k.count for k in kernels), 0),
            per_kernel_s,
        )

    ordinary = (*ordinary, other(ordinary, autograd_ops(t)))
    scan.append(other(scan, scan_ops(t)))
    return ScanPrediction(
        steps=t,
        batch=b,
        hidden=h,
        input_size=i,
        precision=precision.value,
        hardware=hardware.id,
        per_kernel_s=per_kernel_s,
        levels=levels,
        scan=tuple(scan),
        ordinary=ordinary,
    )


@dataclasses.dataclass(frozen=True)
class RnnShape:
    """An `nn.RNN` as one step runs it: its module path, time steps, batch, input and
    hidden sizes."""

    module: str
    steps: int
    batch: int
    input_size: int
    hidden: int


# Backward ops that run a whole recurrence in one call: cuDNN's, MIOpen's, oneDNN's.
_FUSED_RNN_BACKWARDS = ("_cudnn_rnn_backward", "miopen_rnn_backward", "mkldnn_rnn_layer_backward")

SCAN_RULES = (
    "an nn.RNN's backward as a parallel scan (BPPSA): its measured backward (its ops and"
    " their share of the time outside ops, on the scale of the step timed without the"
    " profiler) carried over by the scan's predicted time over autograd's, both counted"
    " kernel by kernel at the larger of the roofline and the cost of one of its"
    " backward's kernels as measured; where that backward is one fused op (cuDNN's), the"
    " scan predicted outright, each op at least the step's time per op",
)


def on_scan_backward(profile: Profile, rnns: Sequence[RnnShape]) -> Profile:
    """`profile` with the backward of each of `rnns` computed as a parallel scan
    (`optimize.scan_backward`): each RNN's backward ops (by module path, in the backward
    phase) and their share of the time outside ops, scaled by `predict_scan`'s scan time
    over its ordinary time on the profile's hardware and precision. Where the measured
    backward is one fused op (cuDNN's on a GPU), the scan's predicted time replaces it
    outright, each of its ops at least the step's time per op. Raises ConfigError when
    `rnns` is empty or an RNN's backward was not measured."""
    if not rnns:
        raise ConfigError(
            "--scan-backward: the model has no nn.RNN to scan (the scan covers single-layer,"
            " one-direction Elman RNNs)."
        )
    ops = list(profile.ops)
    timed = [op for op in ops if op.time_s is not None]
    outside = profile.unattributed_s or 0.0
    outside_per_op = outside / len(timed) if timed else 0.0
    # The profiled run's times, on the scale of the step timed without the profiler
    # (whose per-op cost inflates a backward of thousands of small ops).
    profiled = sum(op.time_s or 0.0 for op in timed) + outside
    step = profile.step_time_s
    to_timed = step / profiled if step and profiled > 0 else 1.0
    precision = profile.workload.precision
    scans = []
    for rnn in rnns:
        mine = [
            i
            for i, op in enumerate(ops)
            if op.module == rnn.module and op.phase is Phase.BACKWARD and op.time_s is not None
        ]
        if not mine:
            raise ConfigError(
                f"--scan-backward: the profile has no timed backward op of {rnn.module!r};"
                " profile the step with per-op times (not --shape-only)."
            )
        in_ops = sum(ops[i].time_s or 0.0 for i in mine)
        measured = (in_ops + outside_per_op * len(mine)) * to_timed
        fused = any(ops[i].name.endswith(_FUSED_RNN_BACKWARDS) for i in mine)
        # A fused backward (cuDNN's on a GPU) is not the step-by-step one the count
        # describes: the scan is predicted outright, each op at least the step's time
        # per op it dispatches (on a GPU bound by launches, about one launch).
        per_kernel = (step or profiled) / len(ops) if fused else measured / len(mine)
        p = predict_scan(
            rnn.steps,
            rnn.batch,
            rnn.hidden,
            rnn.input_size,
            profile.hardware,
            precision=precision,
            per_kernel_s=per_kernel,
        )
        ordinary_s = measured if fused else p.ordinary_s
        ratio = p.scan_s / ordinary_s
        for i in mine:
            ops[i] = dataclasses.replace(ops[i], time_s=(ops[i].time_s or 0.0) * ratio)
        outside -= outside_per_op * len(mine) * (1 - ratio)
        scans.append(
            ScannedBackward(
                module=rnn.module,
                steps=rnn.steps,
                batch=rnn.batch,
                hidden=rnn.hidden,
                input_size=rnn.input_size,
                levels=p.levels,
                ordinary_flops=p.ordinary_flops,
                scan_flops=p.scan_flops,
                measured_s=measured,
                per_kernel_s=per_kernel,
                ordinary_s=ordinary_s,
                scan_s=p.scan_s,
                predicted_s=measured * ratio,
            )
        )
    timing, profiled_step = scaled_step(profile, ops, outside)
    return dataclasses.replace(
        profile,
        ops=tuple(ops),
        timing=timing,
        profiled_step_s=profiled_step,
        unattributed_s=outside,
        prediction=Prediction(
            changes={"scan-backward": ",".join(r.module for r in rnns)},
            source_hardware=profile.hardware.id,
            measured_step_time_s=profile.step_time_s,
            rules=SCAN_RULES,
            assumptions=(
                "the scan's batched products and the ordinary backward's small kernels reach"
                " the same fraction of their predicted time (the carry-over's ratio)",
            ),
            scans=tuple(scans),
        ),
    )
