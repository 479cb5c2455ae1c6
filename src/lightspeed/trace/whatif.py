"""What-ifs predicted from a GPU trace (Daydream): its steps' dependency graph
(`trace.replay`) changed, then replayed, beside the same graph replayed unchanged.

Changes, each with what it assumes (`TracePrediction.assumptions`):
- another GPU: every device task carried over (`trace.carry`), host time kept;
- mixed precision: the fp32 matrix products with recorded shapes run in bf16 or fp16
  under autocast, their inputs' casts added (`trace.carry.in_precision_durations`);
- CUDA graphs: each step's device work captured as one graph (`dependency._captured`);
- communication X× faster: each NCCL kernel's time divided by X (with every rank's trace,
  each collective's transfer only: `replay.replay_ranks`);
- a fused optimizer: each `Optimizer.step#…` span's update kernels as one fused pass
  (`dependency.FUSED_ADAMW_SHARE` of their time), its host launches as one;
- data parallel: each step's gradient buckets all-reduced over a catalog link on a
  stream of their own, overlapping backward (`trace.data_parallel`).

A change's effect is the changed replay over the unchanged one, applied to nothing
else: the unchanged replay is the baseline, so the graph's own error cancels. A step's
time, replayed or predicted, is its host's span or, where longer, the span of the device
work it launched: a host with no sync to wait in runs ahead of its GPU only so far.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.link import Link
from lightspeed.predict.data_parallel import DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES
from lightspeed.trace.analysis import traced_step_timeline
from lightspeed.trace.carry import (
    CARRY_RULES,
    carried_durations,
    communication_kernels,
    in_precision_durations,
    trace_hardware,
)
from lightspeed.trace.data_parallel import all_reduces, gradient_buckets
from lightspeed.trace.dependency import with_durations
from lightspeed.trace.events import Kind, Trace
from lightspeed.trace.load import trace_files
from lightspeed.trace.names import KERNEL_TYPES
from lightspeed.trace.ranks import map_ranks
from lightspeed.trace.replay import (
    DeviceDurations,
    Inserted,
    StepGraph,
    StepReplay,
    replay_graphs,
    step_graph,
)
from lightspeed.trace.steps import step_windows
from lightspeed.trace.timeline import Timeline

if TYPE_CHECKING:  # Python 3.10's typing has no Unpack; annotations are not evaluated
    from typing_extensions import Unpack

__all__ = [
    "Changes",
    "PredictedStep",
    "TracePrediction",
    "predict_trace",
    "predict_trace_files",
    "predict_traces",
]

# What the benchmarks measured each change against (docs/benchmarks.md).
VALIDATED = {
    "cuda_graphs": "CUDA graphs: 3 models' steps captured and measured on an H200,"
    " predicted 4.6–7.9 % long",
    "hardware": "another GPU: the compute kernels' time per step of one recommendation"
    " model, A100 ↔ V100: 3.8–11.8 % off for 4 steps of 5, 38–54 % for the fifth",
    "dtype": "autocast to bf16: 3 models on an H200, +11 % where the GPU bounds the step,"
    " −18 to −30 % where the host does (autocast's own host time is not modelled)",
    "fused_optimizer": "a fused AdamW: BERT-base on an H200, the fused step's own trace"
    " predicted from the per-parameter and the foreach traces within 2.0 and 0.6 %",
}
FUSED_ASSUMPTION = (
    "a fused optimizer: each Optimizer.step span's update kernels replaced by one fused"
    " AdamW pass taking 7/20 of their time (7 accesses an element against the foreach"
    " AdamW's 20, at the same share of the bandwidth); the host's work from the span's first"
    " launch to its last gone, one launch standing for them"
)
GRAPHS_ASSUMPTION = (
    "CUDA graphs: each step's device work captured as one graph, launched where the"
    " step's first launch was; the host's work and launches between the step thread's"
    " first and last launch gone; the kernels in each stream's order, back to back"
)


@dataclasses.dataclass(frozen=True)
class PredictedStep:
    """One step: traced, replayed unchanged, and predicted with the changes (seconds),
    and the device's busy time replayed unchanged and predicted."""

    number: int
    traced_s: float
    replayed_s: float
    predicted_s: float
    replayed_busy_s: float
    predicted_busy_s: float

    @property
    def speedup(self) -> float:
        """The step replayed unchanged over the step predicted (> 1: faster)."""
        return self.replayed_s / self.predicted_s if self.predicted_s > 0 else float("nan")


@dataclasses.dataclass(frozen=True)
class TracePrediction:
    """A trace's steps predicted with `changes`, and what they assume and which of them
    the benchmarks measured (`validated`)."""

    path: str
    source: str
    target: str
    changes: dict[str, str]
    steps: tuple[PredictedStep, ...]
    assumptions: tuple[str, ...]
    validated: tuple[str, ...]
    # The device time carried by time alone (no recorded shapes), of all carried, s.
    by_time_s: float = 0.0
    carried_s: float = 0.0
    # The first step's timeline as traced, replayed unchanged and predicted.
    timelines: dict[str, Timeline] = dataclasses.field(default_factory=dict)
    rank: int | None = None
    # The steps' device time by kind and by stream (s): replayed unchanged, predicted.
    device_time: tuple[tuple[str, float, float], ...] = ()


class Changes(TypedDict, total=False):
    """The changes a trace's steps are predicted with (at least one; see the module's
    docstring): another catalog GPU (`hardware`), autocast to bf16 or fp16
    (`precision`), CUDA graphs, communication `comm_speedup`× faster, a fused optimizer,
    and `data_parallel`: N processes and the link between them."""

    hardware: Hardware | None
    precision: Precision | None
    cuda_graphs: bool
    comm_speedup: float | None
    fused_optimizer: bool
    data_parallel: tuple[int, Link] | None


def predict_trace(trace: Trace, **changes: Unpack[Changes]) -> TracePrediction:
    """`trace`'s steps predicted with the `changes` given. Raises ConfigError when none
    is given, or the trace has no `ProfilerStep`."""
    (only,) = predict_traces([trace], **changes)
    return only


def predict_traces(
    traces: Sequence[Trace], **changes: Unpack[Changes]
) -> tuple[TracePrediction, ...]:
    """Each trace's steps predicted with the `changes` given, one prediction per trace.
    Several traces are the ranks of one run: replayed together, their collectives
    joined (`replay.replay_graphs`), so that faster communication shortens only what the
    last rank to arrive waits for. Raises ConfigError as `predict_trace` does, and for
    `data_parallel` with several ranks, or a trace that communicates already or
    records no gradient sizes."""
    asked = _checked(_Asked(**changes, joined=len(traces) > 1))
    return _reduced([_rank_part(t, asked) for t in traces], asked)


def predict_trace_files(
    paths: Sequence[str | Path], *, workers: int | None = None, **changes: Unpack[Changes]
) -> tuple[TracePrediction, ...]:
    """`predict_traces` on the traces `paths` name (files, or folders of one run's
    ranks), each rank read and made into its graphs by `workers` processes (default: a
    pool, `ranks.map_ranks`), the ranks replayed together here."""
    files = trace_files(paths)
    asked = _checked(_Asked(**changes, joined=len(files) > 1))
    parts = map_ranks(files, functools.partial(_rank_part, asked=asked), workers)
    return _reduced(parts, asked)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Asked:
    """The changes asked for (`Changes`), and whether several ranks are replayed
    together."""

    hardware: Hardware | None = None
    precision: Precision | None = None
    cuda_graphs: bool = False
    comm_speedup: float | None = None
    fused_optimizer: bool = False
    data_parallel: tuple[int, Link] | None = None
    joined: bool


def _checked(asked: _Asked) -> _Asked:
    """`asked`, once the changes are known to go together (ConfigError where not)."""
    _check(
        asked.hardware,
        asked.precision,
        asked.cuda_graphs or asked.fused_optimizer or asked.data_parallel is not None,
        asked.comm_speedup,
    )
    if asked.data_parallel is not None:
        if asked.data_parallel[0] < 1:
            raise ConfigError(f"--dp {asked.data_parallel[0]} must be at least 1.")
        if asked.joined:
            raise ConfigError(
                "--dp: these ranks communicate already; predict their communication faster"
                " with --comm-speedup X, or give one process's trace."
            )
        if asked.comm_speedup is not None:
            raise ConfigError(
                "--comm-speedup speeds up a trace's own communication; --dp's all-reduces run"
                " at the speed of --link: name a faster link instead."
            )
    return asked


@dataclasses.dataclass(frozen=True)
class _RankPart:
    """One rank's share of a prediction, made where its trace is read: its changes, its
    graphs unchanged and changed, and its first step's timeline as traced."""

    path: str
    rank: int | None
    source: str  # the traced GPU's and the target's catalog ids
    target: str
    by_time_s: float
    carried_s: float
    names: dict[str, str]
    assumptions: tuple[str, ...]
    unchanged: StepGraph
    changed: StepGraph
    traced_timeline: Timeline | None


def _rank_part(trace: Trace, asked: _Asked) -> _RankPart:
    """The map of a prediction: one rank's graphs with the changes `asked`."""
    change = _changes(trace, asked.hardware, asked.precision)
    names = dict(change.names)
    assumptions = list(change.assumptions)
    durations = change.durations
    inserted: list[Inserted] = []
    if asked.comm_speedup is not None:
        if not asked.joined:
            durations = _faster_communication(trace, durations, asked.comm_speedup)
        names["comm_speedup"] = f"{asked.comm_speedup:g}×"
        assumptions.append(_comm_assumption(asked.comm_speedup, asked.joined))
    if asked.cuda_graphs:
        names["cuda_graphs"] = "each step"
        assumptions.append(GRAPHS_ASSUMPTION)
    if asked.fused_optimizer:
        names["fused_optimizer"] = "AdamW"
        assumptions.append(FUSED_ASSUMPTION)
    if asked.data_parallel is not None:
        processes, link = asked.data_parallel
        inserted, assumption = _data_parallel(trace, processes, link)
        names["data_parallel"] = f"{processes} processes over {link.id}"
        assumptions.append(assumption)
    windows = step_windows(trace)
    # The step the replays draw (`replay.StepReplay.timeline`): the first of several.
    first = windows[0].number if len(windows) > 1 else None
    unchanged = step_graph(trace)
    if asked.cuda_graphs or asked.fused_optimizer or inserted:
        changed = step_graph(
            trace,
            durations,
            graphs=asked.cuda_graphs,
            fused_optimizer=asked.fused_optimizer,
            inserted=inserted,
        )
    else:  # only durations change: the same graph, not built twice
        changed = with_durations(unchanged, trace, durations)
    return _RankPart(
        path=trace.path,
        rank=trace.rank,
        source=change.source.id,
        target=change.target.id,
        by_time_s=change.by_time_s,
        carried_s=change.carried_s,
        names=names,
        assumptions=tuple(assumptions),
        unchanged=unchanged,
        changed=changed,
        traced_timeline=None if first is None else traced_step_timeline(trace, first),
    )


def _reduced(parts: Sequence[_RankPart], asked: _Asked) -> tuple[TracePrediction, ...]:
    """The reduce of a prediction: the ranks' graphs replayed (together where several)."""
    unchanged = replay_graphs([p.unchanged for p in parts], timeline=True)
    predicted = replay_graphs(
        [p.changed for p in parts],
        comm_speedup=asked.comm_speedup if asked.comm_speedup is not None else 1.0,
        timeline=True,
    )
    return tuple(
        _prediction(part, before, after)
        for part, before, after in zip(parts, unchanged, predicted, strict=True)
    )


def _check(
    hardware: Hardware | None,
    precision: Precision | None,
    graph_changes: bool,
    comm_speedup: float | None,
) -> None:
    if hardware is None and precision is None and not graph_changes and comm_speedup is None:
        raise ConfigError(
            "predict --trace: give a change to predict: --hardware ID, --dtype bf16|fp16,"
            " --cuda-graphs, --fused-optimizer, --dp N --link ID or --comm-speedup X."
        )
    if comm_speedup is not None and not comm_speedup > 0:
        raise ConfigError(
            f"--comm-speedup {comm_speedup}: give a positive factor (2: twice as fast)."
        )
    if precision is not None and precision not in (Precision.BF16, Precision.FP16):
        raise ConfigError(
            f"--dtype {precision.value}: from a trace, autocast to bf16 or fp16 is predicted."
        )


@dataclasses.dataclass(frozen=True)
class _Change:
    """One trace's device durations changed (None: unchanged), what each change is
    called and assumes, and how much of the device time was carried by time alone."""

    source: Hardware
    target: Hardware
    durations: DeviceDurations | None
    names: dict[str, str]
    assumptions: tuple[str, ...]
    by_time_s: float = 0.0
    carried_s: float = 0.0


def _changes(trace: Trace, hardware: Hardware | None, precision: Precision | None) -> _Change:
    source = trace_hardware(trace)
    target = hardware or source
    durations: DeviceDurations | None = None
    assumptions: list[str] = []
    names: dict[str, str] = {}
    by_time = carried = 0.0
    if precision is not None:
        durations = in_precision_durations(trace, precision, source)
        names["dtype"] = precision.value
        assumptions.append(
            f"autocast to {precision.value}: fp32 matrix products with recorded shapes at"
            " their speed of light in it over the one they ran at, plus their inputs'"
            " casts at the memory bandwidth; other kernels and the host's time kept (the"
            " casts' dispatch on the host is not added)"
        )
    if hardware is not None:
        carried_to, by_shapes = carried_durations(trace, target, source)
        if durations is not None:  # both: the products' new times, carried over
            traced = trace.table(Kind.KERNEL).dur_us
            scale = carried_to[Kind.KERNEL] / np.where(traced > 0, traced, 1.0)
            carried_to[Kind.KERNEL] = durations[Kind.KERNEL] * scale
        durations = carried_to
        kernels = trace.table(Kind.KERNEL)
        carried = float(kernels.dur_us.sum()) * 1e-6
        by_time = float(kernels.dur_us[~by_shapes].sum()) * 1e-6
        names["hardware"] = target.id
        assumptions += [*CARRY_RULES, "the host's time, launches included, kept"]
    return _Change(source, target, durations, names, tuple(assumptions), by_time, carried)


def _data_parallel(trace: Trace, processes: int, link: Link) -> tuple[list[Inserted], str]:
    """The all-reduces to insert into `trace` for `processes` processes over `link`, and
    what they assume."""
    if communication_kernels(trace).any():
        raise ConfigError(
            f"{trace.path}: this trace runs collectives already; --dp inserts a"
            " data-parallel step's all-reduces into one process's trace. Predict its"
            " communication faster with --comm-speedup X."
        )
    buckets = gradient_buckets(trace)
    if not buckets:
        raise ConfigError(
            f"{trace.path}: no gradient sizes recorded (torch::autograd::AccumulateGrad"
            " with Input Dims); trace the training step with record_shapes=True to"
            " predict --dp."
        )
    steps = len({b.step for b in buckets})
    nbytes = sum(b.nbytes for b in buckets) / steps
    gradients = sum(b.gradients for b in buckets) / steps
    assumption = (
        f"data parallel, {processes} processes over {link.name}: each step's"
        f" {gradients:.0f} gradients ({nbytes / 2**20:.1f} MiB, from each AccumulateGrad's"
        " recorded shape) in DDP's buckets in the order they are ready (the first of"
        f" {FIRST_BUCKET_BYTES / 2**20:g} MiB, then of {DEFAULT_BUCKET_BYTES / 2**20:g} MiB),"
        " each a ring all-reduce, 2(n−1)/n · bytes / bandwidth + 2(n−1) · latency, on a"
        " stream of its own, launched when its last gradient is accumulated after the"
        " device work launched before it; the first kernel after backward waits for them;"
        " the gradients' copies into buckets and DDP's host work not added"
    )
    return all_reduces(buckets, processes, link), assumption


def _faster_communication(
    trace: Trace, durations: DeviceDurations | None, speedup: float
) -> DeviceDurations:
    """`durations` with each communication kernel's time divided by `speedup`."""
    kernels = trace.table(Kind.KERNEL)
    base = durations[Kind.KERNEL] if durations is not None else kernels.dur_us.astype(float)
    out = dict(durations or {})
    out[Kind.KERNEL] = np.where(communication_kernels(trace), base / speedup, base)
    return out


def _comm_assumption(speedup: float, joined: bool) -> str:
    if joined:
        return (
            f"communication {speedup:g}× faster: each collective's transfer (its shortest"
            " kernel across the ranks) divided by it; every rank still waits for the last"
            " to arrive"
        )
    return (
        f"communication {speedup:g}× faster: each NCCL kernel's traced time divided by it,"
        " the time it waited for other ranks included (one rank's trace cannot tell them"
        " apart: give every rank's trace to join them)"
    )


def _prediction(part: _RankPart, unchanged: StepReplay, changed: StepReplay) -> TracePrediction:
    if not unchanged.steps:
        raise ConfigError(
            f"{part.path}: no whole ProfilerStep to predict; trace a few steps with"
            " torch.profiler's schedule (lightspeed.observe does)."
        )
    by_number = {s.number: s for s in changed.steps}
    steps = tuple(
        PredictedStep(
            number=s.number,
            traced_s=s.traced_s,
            replayed_s=s.step_s,
            predicted_s=by_number[s.number].step_s,
            replayed_busy_s=s.replayed_busy_s,
            predicted_busy_s=by_number[s.number].replayed_busy_s,
        )
        for s in unchanged.steps
        if s.number in by_number
    )
    validated = tuple(VALIDATED[k] for k in VALIDATED if k in part.names)
    timelines = {
        "traced": part.traced_timeline,
        "replayed": unchanged.timeline,
        "predicted": changed.timeline,
    }
    return TracePrediction(
        path=part.path,
        source=part.source,
        target=part.target,
        changes=part.names,
        steps=steps,
        assumptions=part.assumptions,
        validated=validated,
        by_time_s=part.by_time_s,
        carried_s=part.carried_s,
        timelines={k: v for k, v in timelines.items() if v is not None},
        rank=part.rank,
        device_time=tuple(
            (what, unchanged.device_time_s.get(what, 0.0), changed.device_time_s.get(what, 0.0))
            for what in _kinds_then_streams(unchanged.device_time_s, changed.device_time_s)
        ),
    )


def _kinds_then_streams(*times: dict[str, float]) -> list[str]:
    """The keys of `times` (kinds, then "stream N"), kinds in their order, streams by N."""
    keys = list(dict.fromkeys(k for t in times for k in t))
    kinds = [k.value for k in KERNEL_TYPES if k.value in keys]
    streams = sorted((k for k in keys if k not in kinds), key=lambda k: int(k.split()[-1]))
    return kinds + streams
