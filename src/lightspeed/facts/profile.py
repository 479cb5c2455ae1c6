"""`Profile`: every fact one profiled training step yields, on the Hardware it is modelled on.

A prediction (another batch size, precision or device) is also a Profile, so it is
reported and compared exactly like a measurement.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from lightspeed.facts.hardware import Hardware
from lightspeed.facts.records import MemoryBreakdown, OpRecord
from lightspeed.facts.timing import Measurement, WorkloadInfo


class OpTimeSource(str, enum.Enum):
    """What an op's `time_s` is."""

    CPU = "cpu-inclusive"  # CPU time of the op, including the aten calls it makes
    CUDA_KERNELS = "cuda-kernels"  # GPU time of the kernels the op launched
    NONE = "none"  # per-op times were not measured


@dataclasses.dataclass(frozen=True, kw_only=True)
class FusionPrediction:
    """K jobs fused into one step (`predict.fusion`), against the K run one after another.

    `serial_step_s`: K measured steps, in seconds. `fused_step_s`: the predicted fused
    step. `speedup`: serial over fused. `overhead_share`: the share of the measured step
    paid once (per-op overhead and time outside ops), 0 to 1. `largest_jobs`: the most
    jobs whose fused step fits the hardware's memory (None: not known). `helps`: whether
    the speed-up reaches `predict.fusion.FUSION_HELPS`.
    """

    jobs: int
    serial_step_s: float
    fused_step_s: float
    speedup: float
    overhead_share: float
    largest_jobs: int | None
    helps: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScannedBackward:
    """One `nn.RNN`'s backward predicted as a parallel scan (`predict.scan`): the RNN
    (`module`, `steps` T, `batch`, `hidden` and `input_size` units), the scan's `levels`,
    the FLOPs of autograd's backward and of the scan, and in seconds: the RNN's backward
    as measured (its ops and their share of the time outside ops), the cost of each of its
    kernels there (`per_kernel_s`), the predicted backward as autograd runs it and as the
    scan runs it (each kernel at the larger of its speed of light and `per_kernel_s`), and
    the measured backward carried over to the scan (measured × scan / ordinary)."""

    module: str
    steps: int
    batch: int
    hidden: int
    input_size: int
    levels: int
    ordinary_flops: float
    scan_flops: float
    measured_s: float
    per_kernel_s: float
    ordinary_s: float
    scan_s: float
    predicted_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class CarryValidation:
    """How well one kind of prediction matched measurement: over `pairs` comparisons, the
    `median_error` and `worst_error` of |predicted − measured| / measured (fractions),
    against the measurements `data` names (docs/benchmarks.md gives the command)."""

    pairs: int
    median_error: float
    worst_error: float
    data: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class CarriedOps:
    """One kind of op of a profile predicted on other hardware: how its time was carried
    over (`rule`), how many `ops`, their time on the source (`measured_s`) and predicted
    on the target (`predicted_s`), in seconds, and how well that kind of prediction has
    been checked (`validation`; None: never checked)."""

    kind: str
    rule: str
    ops: int
    measured_s: float
    predicted_s: float
    validation: CarryValidation | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prediction:
    """How a predicted Profile was made from a measured one.

    `changes`: what was changed, by name (`{"hardware": "h100-sxm"}`), as the CLI's
    options say it. `measured_step_time_s`: the step time of the profile it started from,
    on `source_hardware` (an id). `rules` and `assumptions`: one line each on how the
    figures were made. `validated`: whether this kind of prediction has been checked
    against measurement (docs/benchmarks.md); an unvalidated one says so in reports.
    `largest_batch_size`: the most samples a step of the predicted workload can take
    within the hardware's memory (None: not asked, or the memory is not known).
    `fusion`: what fusing K jobs gains (None: fusion not predicted).
    `carried`: on other hardware, each kind of op: how its time was carried over and how
    well that has been validated (empty: the hardware did not change).
    `scans`: each `nn.RNN` whose backward was predicted as a parallel scan (empty: not
    asked).
    """

    changes: Mapping[str, str]
    source_hardware: str
    measured_step_time_s: float | None
    rules: tuple[str, ...]
    assumptions: tuple[str, ...] = ()
    validated: bool = False
    largest_batch_size: int | None = None
    fusion: FusionPrediction | None = None
    carried: tuple[CarriedOps, ...] = ()
    scans: tuple[ScannedBackward, ...] = ()

    def then(self, later: Prediction) -> Prediction:
        """This prediction followed by `later`, made from its result: both changes, the
        first source and measurement, every rule and assumption."""
        return Prediction(
            changes={**self.changes, **later.changes},
            source_hardware=self.source_hardware,
            measured_step_time_s=self.measured_step_time_s,
            rules=self.rules + tuple(r for r in later.rules if r not in self.rules),
            assumptions=self.assumptions
            + tuple(a for a in later.assumptions if a not in self.assumptions),
            validated=self.validated and later.validated,
            largest_batch_size=later.largest_batch_size or self.largest_batch_size,
            fusion=later.fusion or self.fusion,
            carried=later.carried or self.carried,
            scans=later.scans or self.scans,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    """One step of a workload: its timing, ops, memory, and the hardware it is placed on.

    `profiled_step_s` is the step's time in the profiled run, of which `unattributed_s`
    could not be matched to a captured op (framework overhead, Python, unmatched ops); on
    a GPU, the step as timed without the profiler, whose host-side recording slows a
    launch-bound step (`measure.op_times.at_timed_step`).
    `failure` is the one-line error that cut the profile short, if one did.
    `torch_version` is the PyTorch that ran the step (None when not recorded).
    `cudnn_benchmark`: torch.backends.cudnn.benchmark during a CUDA step (None: not a
    CUDA step, or not recorded).
    `prediction`: how this profile was predicted from a measured one (None: measured).
    """

    workload: WorkloadInfo
    hardware: Hardware
    timing: Measurement | None
    ops: tuple[OpRecord, ...] = ()
    memory: MemoryBreakdown | None = None
    op_time_source: OpTimeSource = OpTimeSource.NONE
    profiled_step_s: float | None = None
    unattributed_s: float | None = None
    failure: str | None = None
    torch_version: str | None = None
    prediction: Prediction | None = None
    cudnn_benchmark: bool | None = None

    @property
    def step_time_s(self) -> float | None:
        """Median step time of the uninstrumented timing run, in seconds."""
        return None if self.timing is None else self.timing.median_s
