"""A GPU trace's device work carried to another GPU, kernel by kernel, with the one
cross-hardware rule every prediction uses (`predict.hardware.carry_time`).

- **Matrix products with recorded shapes** (`trace.matmuls`: `aten::mm`, `addmm`, `bmm`,
  `baddbmm` with `Input Dims`): each op's kernels, their time summed, carried as the op
  they belong to (its FLOPs, bytes and precision on both rooflines), then shared out over
  its kernels in proportion.
- **Every other kernel, copy and set**: Kineto records no bytes per kernel, so it is
  carried by its time alone, as memory-bound: time × the source's bandwidth over the
  target's. The report says how much of the time went this way.
- **Communication** (NCCL's kernels): kept apart, never carried: it depends on the world
  size and the links, not on the GPU alone.

The source is the trace's GPU, when its `deviceProperties` name one GPU of the catalog.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lightspeed.dtypes import TORCH_DTYPE_NAMES, Precision
from lightspeed.errors import TraceError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.trace.dependency import DeviceDurations
from lightspeed.trace.events import EventTable, Kind, Trace
from lightspeed.trace.matmuls import MatmulIndex, catalog_gpu_id, matmul_index
from lightspeed.trace.names import KERNEL_TYPES, KernelType, name_types
from lightspeed.trace.steps import device_steps, launch_times, step_windows

_COMMUNICATION = KERNEL_TYPES.index(KernelType.COMMUNICATION)
_COMPUTATION = KERNEL_TYPES.index(KernelType.COMPUTATION)

__all__ = [
    "CarriedStep",
    "TraceCarry",
    "carried_durations",
    "carry_trace",
    "communication_kernels",
    "in_precision_durations",
    "trace_hardware",
]

CARRY_RULES = (
    "matrix products with recorded shapes: each op's kernels carried as the op (its FLOPs,"
    " bytes and precision on both rooflines: predict.hardware.carry_time)",
    "other kernels, copies and sets: time × the source's memory bandwidth over the"
    " target's (no bytes are recorded per kernel: carried by time alone, as memory-bound)",
    "communication kernels (NCCL): kept apart, not carried",
)


@dataclasses.dataclass(frozen=True)
class CarriedStep:
    """One step's device work, traced and carried to the target, in seconds: compute
    kernels (`compute_s`, `predicted_s`), of which carried by shapes
    (`by_shapes_s`, traced); copies and sets; and communication, kept apart."""

    number: int | None
    compute_s: float
    predicted_s: float
    by_shapes_s: float
    memory_s: float
    predicted_memory_s: float
    communication_s: float


@dataclasses.dataclass(frozen=True)
class TraceCarry:
    """A trace's steps carried from `source` to `target` (catalog ids)."""

    source: str
    target: str
    steps: tuple[CarriedStep, ...]
    rules: tuple[str, ...] = CARRY_RULES


def trace_hardware(trace: Trace) -> Hardware:
    """The catalog entry of the one GPU kind `trace` ran on; TraceError otherwise."""
    from lightspeed.hardware import catalog_hardware

    if not trace.devices:
        raise TraceError(
            f"{trace.path}: the trace names no GPU (no deviceProperties, which Kineto writes"
            " from PyTorch 1.13 on); a prediction needs its GPU's catalog entry."
        )
    hw_id = catalog_gpu_id(trace.devices)
    if hw_id is None:
        names = ", ".join(sorted({d.name for d in trace.devices}))
        raise TraceError(
            f"{trace.path}: its devices ({names}) are not one GPU of the catalog; see"
            " `lightspeed hw list`."
        )
    return catalog_hardware(hw_id)


def _device(trace: Trace) -> tuple[EventTable, np.ndarray]:
    """The kernel table and, per kernel, its kind (`KERNEL_TYPES` index)."""
    kernels = trace.table(Kind.KERNEL)
    return kernels, name_types(trace)[kernels.name]


def communication_kernels(trace: Trace) -> np.ndarray:
    """Which of the trace's kernels communicate (NCCL's, as HTA classifies them)."""
    _, types = _device(trace)
    return types == _COMMUNICATION


def _products(
    trace: Trace, kernels: EventTable
) -> tuple[MatmulIndex | None, np.ndarray, list[tuple[int, OpRecord]]]:
    """The trace's matrix products (`trace.matmuls`), per kernel the product op it
    belongs to (-1: none), and each product op with its kernels' time as an OpRecord
    (its index among the products)."""
    index = matmul_index(trace, kernels)
    if index is None or not len(index.op_of_event):
        return index, np.full(len(kernels), -1, dtype=np.int64), []
    ops = index.op_of_event
    mapped = ops >= 0
    time_us = np.bincount(
        ops[mapped], weights=kernels.dur_us[mapped], minlength=len(index.products)
    )
    records = []
    for i, product in enumerate(index.products):
        if time_us[i] <= 0:
            continue
        dtype = TORCH_DTYPE_NAMES[product.precision]
        out = product.batch * product.m * product.n * product.element_bytes
        records.append(
            (
                i,
                OpRecord(
                    index=i,
                    name=index.names[i],
                    module="",
                    phase=Phase.FORWARD,
                    input_shapes=(),
                    input_dtypes=(dtype, dtype),
                    output_shapes=(),
                    output_dtypes=(dtype,),
                    flops=int(product.flops),
                    macs=int(product.flops // 2),
                    bytes_read=int(product.bytes - out),
                    bytes_written=int(out),
                    time_s=float(time_us[i]) * 1e-6,
                ),
            )
        )
    return index, ops, records


def _scaled(kernels: EventTable, ops: np.ndarray, factors: dict[int, float]) -> np.ndarray:
    """The kernels' durations (µs), each product op's kernels scaled by its factor."""
    out = kernels.dur_us.astype(np.float64).copy()
    for i, factor in factors.items():
        out[ops == i] *= factor
    return out


def carried_durations(
    trace: Trace, target: Hardware, source: Hardware | None = None
) -> tuple[DeviceDurations, np.ndarray]:
    """The trace's device events' durations (µs) on `target` (see the module's
    docstring), per kind, and which kernels were carried by their shapes."""
    from lightspeed.predict.hardware import carry_time

    source = source or trace_hardware(trace)
    kernels, types = _device(trace)
    _, ops, records = _products(trace, kernels)
    carried = _scaled(
        kernels,
        ops,
        {i: carry_time(op, source, target) / (op.time_s or 1.0) for i, op in records},
    )
    by_shapes = ops >= 0
    ratio = source.memory_bandwidth_bytes_per_s / target.memory_bandwidth_bytes_per_s
    others = ~by_shapes & (types != _COMMUNICATION)
    carried[others] = kernels.dur_us[others] * ratio
    durations: DeviceDurations = {Kind.KERNEL: carried}
    for kind in (Kind.MEMCPY, Kind.MEMSET):
        if kind in trace.tables:
            durations[kind] = trace.table(kind).dur_us * ratio
    return durations, by_shapes


def in_precision_durations(
    trace: Trace, precision: Precision, hardware: Hardware | None = None
) -> DeviceDurations:
    """The trace's kernels' durations (µs) with its fp32 matrix products run in
    `precision` under autocast on the same GPU (`hardware`, by default the trace's):
    each product's kernels scaled by its speed of light in `precision` over the one it
    ran at, keeping the share of the peak reached, plus the casts of its two inputs
    (read in fp32, written in `precision`) at the memory bandwidth. Other kernels keep
    their time: autocast leaves most element-wise work in fp32."""
    from lightspeed.analysis.roofline import place_on

    hw = hardware or trace_hardware(trace)
    kernels, _ = _device(trace)
    index, ops, records = _products(trace, kernels)
    factors: dict[int, float] = {}
    extra: dict[int, float] = {}
    for i, op in records:
        assert index is not None
        product = index.products[i]
        if product.precision is not Precision.FP32:
            continue
        before = place_on(hw, op.flops, op.bytes, Precision.FP32, matrix=True).sol_time_s
        if index.tf32 is not None and index.tf32[i]:
            before = place_on(hw, op.flops, op.bytes, Precision.TF32, matrix=True).sol_time_s
        half = op.bytes / 2
        after = place_on(hw, op.flops, half, precision, matrix=True).sol_time_s
        if before <= 0:
            continue
        factors[i] = after / before
        inputs = product.batch * (product.m * product.k + product.k * product.n)
        extra[i] = inputs * 6 / hw.memory_bandwidth_bytes_per_s  # 4 bytes read, 2 written
    out = _scaled(kernels, ops, factors)
    # Each product's casts, shared over its kernels in proportion to their new time.
    for i, seconds in extra.items():
        mine = ops == i
        total = out[mine].sum()
        if total > 0:
            out[mine] += out[mine] / total * seconds * 1e6
    return {Kind.KERNEL: out}


def carry_trace(trace: Trace, target: Hardware, source: Hardware | None = None) -> TraceCarry:
    """Each `ProfilerStep` of `trace` (the last, cut by the profiler, left out; the whole
    trace where it has none) with its device work carried to `target`."""
    source = source or trace_hardware(trace)
    kernels, types = _device(trace)
    durations, by_shapes = carried_durations(trace, target, source)
    carried = durations[Kind.KERNEL]
    ratio = source.memory_bandwidth_bytes_per_s / target.memory_bandwidth_bytes_per_s
    copies = [trace.table(k) for k in (Kind.MEMCPY, Kind.MEMSET) if k in trace.tables]

    windows = step_windows(trace)
    if len(windows) > 1:
        windows = windows[:-1]

    def step_of(table: EventTable) -> np.ndarray:
        """Each event's window (its launch's), all in the one window of a trace without
        steps."""
        if not windows:
            return np.zeros(len(table), dtype=np.int64)
        return device_steps(table, launch_times(trace, table), windows)

    kernel_step = step_of(kernels)
    copy_steps = [(t, step_of(t)) for t in copies]
    compute = types == _COMPUTATION
    communication = types == _COMMUNICATION
    steps = []
    for i, w in enumerate(windows or [None]):
        mine = kernel_step == i
        memory = sum(float(t.dur_us[at == i].sum()) for t, at in copy_steps)
        steps.append(
            CarriedStep(
                number=None if w is None else w.number,
                compute_s=float(kernels.dur_us[mine & compute].sum()) * 1e-6,
                predicted_s=float(carried[mine & compute].sum()) * 1e-6,
                by_shapes_s=float(kernels.dur_us[mine & compute & by_shapes].sum()) * 1e-6,
                memory_s=memory * 1e-6,
                predicted_memory_s=memory * ratio * 1e-6,
                communication_s=float(kernels.dur_us[mine & communication].sum()) * 1e-6,
            )
        )
    return TraceCarry(source=source.id, target=target.id, steps=tuple(steps))
