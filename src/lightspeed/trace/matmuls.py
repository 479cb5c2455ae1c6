"""Matrix products in a trace, placed on the roofline of the GPU that ran them.

A trace recorded with `record_shapes=True` gives each CPU op its `Input Dims` and
`Input type`. For `aten::mm`, `addmm`, `bmm` and `baddbmm` those fix the work exactly:
2·B·M·K·N FLOPs (as `torch.utils.flop_counter` counts them) and, at least, the bytes of
the operands and the result. Each op's kernels are found through the runtime calls
made inside it (`External id`, then `correlation`), so each op has a kernel time.

A trace of the CPU alone has no kernels: there each product is timed by its op's own
duration, and counted in the window its op starts in (no speed of light: no catalog
entry describes a CPU, and tensor-core shapes do not apply).

When `deviceProperties` describe a GPU of the catalog (by its name, or by its SM count
and memory where the name is generic), each op's speed of light is max(FLOPs / peak,
bytes / bandwidth) at the peak of its matrix units in its precision (AMD's fp32 on
MFMA runs at twice the vector rate), and the ops' total speed of
light over their kernel time is how close the matrix products run to it. An fp32
product that ran faster than the fp32 peak allows was run by TF32 tensor cores, and is
placed against that peak instead. Products whose dimensions are not multiples of
their precision's tensor-core multiple (`rules.TENSOR_CORE_MULTIPLE`: 8 for 16-bit,
4 for TF32, 16 for FP8) cannot use tensor cores fully.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lightspeed.document import Unit, Value, line
from lightspeed.dtypes import Precision
from lightspeed.rules import unaligned_dims
from lightspeed.trace.events import (
    US,
    EventTable,
    FloatArray,
    IntArray,
    Kind,
    Trace,
    TraceDevice,
)
from lightspeed.trace.names import BoolArray
from lightspeed.trace.packed import records
from lightspeed.trace.steps import correlate
from lightspeed.trace.window import (
    Fields,
    Shown,
    StepsContext,
    TraceContext,
    WindowAnalyzer,
    WindowContext,
)

# Kineto's `Input type` strings for the floating-point types matrix products run in.
KINETO_TYPES: Mapping[str, tuple[Precision, int]] = {
    "float": (Precision.FP32, 4),
    "double": (Precision.FP64, 8),
    "c10::BFloat16": (Precision.BF16, 2),
    "c10::Half": (Precision.FP16, 2),
}
# No real tensor has a dimension (or a bias) this large; beyond it a size is garbage.
_MAX_SIZE = 2**40
# Products a window keeps one by one (the longest), for a roofline chart: enough to
# show where the time goes, few enough to keep a large trace's JSON small.
POINTS_KEPT = 500


@dataclasses.dataclass(frozen=True)
class Product:
    """One matrix product's work: `batch` products of (m × k) by (k × n)."""

    batch: int
    m: int
    k: int
    n: int
    extra_elements: int  # a bias or an added input, read as well
    precision: Precision
    element_bytes: int

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.k * self.n

    @property
    def bytes(self) -> float:
        b, m, k, n = self.batch, self.m, self.k, self.n
        return float(self.element_bytes * (b * (m * k + k * n + m * n) + self.extra_elements))

    def tensor_core_aligned(self, precision: Precision | None = None) -> bool | None:
        """Whether m, k and n suit the tensor cores of `precision` (by default the
        product's own); None where that precision runs on none."""
        bad = unaligned_dims({"m": self.m, "k": self.k, "n": self.n}, precision or self.precision)
        return None if bad is None else not bad


def product(op: str, dims: Any, types: Any) -> Product | None:
    """The product an `aten::mm/addmm/bmm/baddbmm` call with these `Input Dims` and
    `Input type` computes; None when the shapes or the type do not make one."""
    try:
        if op == "aten::mm":
            (m, k), (k2, n) = dims[0], dims[1]
            batch, extra, operand = 1, 0, 0
        elif op == "aten::addmm":
            (m, k), (k2, n) = dims[1], dims[2]
            batch, extra, operand = 1, math.prod(dims[0]), 1
        elif op == "aten::bmm":
            (batch, m, k), (b2, k2, n) = dims[0], dims[1]
            extra, operand = 0, 0
            if b2 != batch:
                return None
        elif op == "aten::baddbmm":
            (batch, m, k), (b2, k2, n) = dims[1], dims[2]
            extra, operand = math.prod(dims[0]), 1
            if b2 != batch:
                return None
        else:
            return None
        precision, size = KINETO_TYPES[types[operand]]
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    sizes = (batch, m, k, n, extra)
    if k != k2 or not all(type(v) is int and 0 <= v < _MAX_SIZE for v in sizes):
        return None
    return Product(
        batch=batch, m=m, k=k, n=n, extra_elements=extra, precision=precision, element_bytes=size
    )


def _enclosing(ops: EventTable, rows: IntArray, runtime: EventTable) -> IntArray:
    """For each runtime call, the index into `rows` of the op (of those CPU-op rows) it
    runs inside on the same thread, else -1. Matrix products do not nest in one
    another, so the op that starts last before a call is the only candidate.

    By time, not by `External id`: older Kineto versions give runtime calls their
    correlation id as External id."""
    result = np.full(len(runtime), -1, dtype=np.int64)
    for thread in np.unique(ops.tid[rows]):
        positions = np.flatnonzero(ops.tid[rows] == thread)  # into rows
        positions = positions[np.argsort(ops.ts_us[rows[positions]], kind="stable")]
        starts, ends = ops.ts_us[rows[positions]], ops.end_us[rows[positions]]
        calls = np.flatnonzero(runtime.tid == thread)
        at = np.searchsorted(starts, runtime.ts_us[calls], side="right") - 1
        inside = (at >= 0) & (runtime.ts_us[calls] < ends[np.maximum(at, 0)])
        result[calls[inside]] = positions[at[inside]]
    return result


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatmulIndex:
    """The trace's matrix products with their kernels, worked out once per trace.

    Per op: FLOPs, bytes, precision, whether its shapes are unaligned for the tensor
    cores that ran it, and, on a catalog GPU (`hardware`), its speed of light, whether
    it lies below the ridge, and whether TF32 ran it (an fp32 product faster than the
    fp32 peak allows). Per device event: the op it belongs to (-1: none)."""

    flops: FloatArray
    bytes: FloatArray
    unaligned: BoolArray
    products: list[Product]
    op_of_event: IntArray
    names: tuple[str, ...] = ()  # each product's op name
    hardware: str | None = None
    sol_s: FloatArray | None = None
    memory_bound: BoolArray | None = None
    tf32: BoolArray | None = None
    # A trace of the CPU alone: each product's op duration (µs), the products in order
    # of their ops' start, and those starts (µs) in that order: a window's, a slice.
    host_dur_us: FloatArray | None = None
    host_by_start: IntArray | None = None
    host_start_us: FloatArray | None = None


def matmul_index(trace: Trace, device: EventTable) -> MatmulIndex | None:
    """The products of `trace` (shapes recorded, kernels among `device`); None if none."""
    ops = trace.table(Kind.CPU_OP)
    rows: list[int] = []
    products: list[Product] = []
    names: list[str] = []
    # A trace repeats a few shapes (each kept once: `Trace.op_shapes`) over many ops.
    made: dict[tuple[str, int], Product | None] = {}
    for row, shapes in sorted(trace.op_shapes.items()):
        name = trace.names[ops.name[row]]
        key = (name, id(shapes))
        if key not in made:
            made[key] = product(name, *shapes)
        p = made[key]
        if p is not None:
            rows.append(row)
            products.append(p)
            names.append(name)
    if not products:
        return None
    if len(device) == 0:
        by_start = np.argsort(ops.ts_us[rows], kind="stable")
        return MatmulIndex(
            flops=np.array([p.flops for p in products]),
            bytes=np.array([p.bytes for p in products]),
            unaligned=np.zeros(len(products), dtype=bool),
            products=products,
            op_of_event=np.empty(0, dtype=np.int64),
            names=tuple(names),
            host_dur_us=ops.dur_us[rows],
            host_by_start=by_start,
            host_start_us=ops.ts_us[rows][by_start],
        )
    op_of_launch = _enclosing(ops, np.array(rows), trace.table(Kind.RUNTIME))
    launched = op_of_launch >= 0
    found, dev_rows = correlate(trace.table(Kind.RUNTIME).correlation[launched], device)
    op_of_event = np.full(len(device), -1, dtype=np.int64)
    op_of_event[dev_rows[found]] = op_of_launch[launched][found]
    mapped = op_of_event >= 0
    if not mapped.any():
        return None
    index = MatmulIndex(
        flops=np.array([p.flops for p in products]),
        bytes=np.array([p.bytes for p in products]),
        unaligned=np.array([p.tensor_core_aligned() is False for p in products], dtype=bool),
        products=products,
        op_of_event=op_of_event,
        names=tuple(names),
    )
    op_time_us = np.bincount(
        op_of_event[mapped], weights=device.dur_us[mapped], minlength=len(products)
    ).astype(np.float64)
    return _on_catalog_gpu(index, trace.devices, op_time_us)


def catalog_gpu_id(devices: Sequence[TraceDevice]) -> str | None:
    """The catalog id of the one GPU kind `devices` describe (by name, or by SM count and
    memory where the name is generic); None when it is unknown or there are several."""
    from lightspeed.hardware import catalog_id_for_device

    ids = {catalog_id_for_device(d.name, d.sm_count, d.memory_bytes) for d in devices}
    return ids.pop() if len(ids) == 1 else None


def _on_catalog_gpu(
    index: MatmulIndex, devices: tuple[TraceDevice, ...], op_time_us: FloatArray
) -> MatmulIndex:
    """`index` with each product placed on the roofline of the GPU `devices` describe
    (by name, or by SM count and memory where the name is generic), when they are one
    GPU of the catalog; at the peak of its matrix units."""
    # Here, not at the top: only traces with recorded products load the catalog.
    from lightspeed.analysis.roofline import Bound, place_on
    from lightspeed.hardware import catalog_hardware

    hw_id = catalog_gpu_id(devices)
    if hw_id is None:
        return index
    hw = catalog_hardware(hw_id)
    n = len(index.flops)
    sol, below_ridge, tf32 = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
    unaligned = index.unaligned.copy()
    placed: dict[tuple[Product, Precision], Any] = {}

    def place(p: Product, precision: Precision) -> Any:
        if (p, precision) not in placed:
            placed[p, precision] = place_on(hw, p.flops, p.bytes, precision, matrix=True)
        return placed[p, precision]

    for i, p in enumerate(index.products):
        if not (index.flops[i] or index.bytes[i]):  # an empty product: no work to place
            continue
        point = place(p, p.precision)
        faster = op_time_us[i] * US < point.sol_time_s
        if p.precision is Precision.FP32 and faster and Precision.TF32 in hw.peak_flops_per_s:
            point = place(p, Precision.TF32)
            tf32[i] = True
            unaligned[i] = p.tensor_core_aligned(Precision.TF32) is False
        sol[i], below_ridge[i] = point.sol_time_s, point.bound is Bound.MEMORY
    return dataclasses.replace(
        index,
        unaligned=unaligned,
        hardware=hw_id,
        sol_s=sol,
        memory_bound=below_ridge,
        tf32=tf32,
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MatmulPoint:
    """One matrix product of a window: `shape` "B×M×K×N" at the `precision` its tensor
    cores ran (TF32 for an fp32 product faster than the fp32 peak), its work, its
    kernels' time and, on a catalog GPU, its speed of light."""

    name: str
    shape: str
    precision: str
    flops: float
    bytes: float
    time_s: float
    sol_s: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MatmulStats:
    """The matrix products whose kernels ran in one window.

    `time_s`: their kernels' total time. `hardware`: the catalog id their speed of
    light is taken on (None: the GPU is not in the catalog, and the SoL figures are
    None). `sol_s`: the sum of their speeds of light; `memory_bound_s`: kernel time of
    products below the ridge point; `unaligned_s`: kernel time of products with a
    dimension their tensor cores cannot fully use (`unaligned_by_precision`: by the
    precision of those tensor cores), and `unaligned_excess_s` how much of it lies
    above their speed of light.
    """

    ops: int
    flops: float
    bytes: float
    time_s: float
    by_precision: dict[str, float]  # kernel time by precision
    unaligned_s: float
    unaligned_by_precision: dict[str, float] = dataclasses.field(default_factory=dict)
    hardware: str | None = None
    sol_s: float | None = None
    memory_bound_s: float | None = None
    unaligned_excess_s: float | None = None
    tf32_ops: int = 0  # fp32 products faster than the fp32 peak: placed against TF32
    # The POINTS_KEPT longest, longest first (the whole trace's window only).
    points: tuple[MatmulPoint, ...] = ()
    on_host: bool = False  # a trace of the CPU alone: timed by the ops, not by kernels

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.time_s if self.time_s else 0.0

    @property
    def fraction_of_sol(self) -> float | None:
        """Speed of light over kernel time: 1 is the hardware's limit."""
        if self.sol_s is None or not self.time_s:
            return None
        return self.sol_s / self.time_s


def _seconds_by(keys: list[str], time_us: FloatArray | list[float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for key, t in zip(keys, time_us, strict=True):
        totals[key] = totals.get(key, 0.0) + float(t) * US
    return totals


def matmul_stats(
    index: MatmulIndex | None, rows: IntArray, dur_us: FloatArray, *, points: bool = False
) -> MatmulStats | None:
    """The products whose kernels are among the device events at `rows` (with
    durations `dur_us`, all device events); with `points`, the longest one by one as
    well."""
    if index is None:
        return None
    events = rows[index.op_of_event[rows] >= 0]
    if len(events) == 0:
        return None
    op_ids, inverse = np.unique(index.op_of_event[events], return_inverse=True)
    time_us = np.bincount(inverse, weights=dur_us[events]).astype(np.float64)
    return _stats(index, op_ids, time_us, points)


def host_matmul_stats(index: MatmulIndex, start_us: float, end_us: float) -> MatmulStats | None:
    """On a trace of the CPU alone: the products whose ops start in [start_us, end_us),
    each timed by its op's duration."""
    starts, order = index.host_start_us, index.host_by_start
    assert starts is not None and order is not None and index.host_dur_us is not None
    a, b = np.searchsorted(starts, [start_us, end_us], side="left")
    op_ids = np.sort(order[a:b])
    if len(op_ids) == 0:
        return None
    return dataclasses.replace(
        _stats(index, op_ids, index.host_dur_us[op_ids], False), on_host=True
    )


def matmul_stats_steps(
    index: MatmulIndex | None, owner: IntArray, rows: IntArray, dur_us: FloatArray, steps: int
) -> list[MatmulStats | None]:
    """`matmul_stats` of each of `steps` steps at once: `rows` holds the device events of
    every step, `owner` the step of each."""
    if index is None:
        return [None] * steps
    product = index.op_of_event[rows]
    events, step = rows[product >= 0], owner[product >= 0]
    ops = len(index.products)
    keys, inverse = np.unique(step * ops + index.op_of_event[events], return_inverse=True)
    time_us = np.bincount(inverse, weights=dur_us[events]).astype(np.float64)
    bounds = np.searchsorted(keys // ops, np.arange(steps + 1))
    op_ids = keys % ops
    found: list[MatmulStats | None] = [None] * steps
    counts = np.diff(bounds)
    # A step of fewer products than numpy sums pairwise (8) gets its sums from one
    # `reduceat` of all such steps, the same numbers one step's `_stats` gives.
    few = np.flatnonzero((counts > 0) & (counts < 8))
    for step, stats in zip(
        few.tolist(), _few_stats(index, op_ids, time_us, bounds, few), strict=True
    ):
        found[step] = stats
    for step in np.flatnonzero(counts >= 8).tolist():
        a, b = bounds[step], bounds[step + 1]
        found[step] = _stats(index, op_ids[a:b], time_us[a:b], False)
    return found


def _few_stats(
    index: MatmulIndex, op_ids: IntArray, time_us: FloatArray, bounds: IntArray, steps: IntArray
) -> list[MatmulStats]:
    """`_stats` of each of `steps`, whose products are op_ids[bounds[k]:bounds[k + 1]],
    fewer than 8 each: sums in order, as numpy sums so few numbers."""
    if not len(steps):
        return []
    counts = np.diff(bounds)
    chosen = np.zeros(len(counts), dtype=bool)
    chosen[steps] = True
    take = np.flatnonzero(np.repeat(chosen, counts))
    ids, t = op_ids[take], time_us[take]
    starts = np.searchsorted(take, bounds[steps])
    unaligned = index.unaligned[ids]
    tf32 = index.tf32[ids] if index.tf32 is not None else np.zeros(len(ids), bool)

    def per_step(values: np.ndarray) -> list[Any]:
        found: list[Any] = np.add.reduceat(values, starts).tolist()
        return found

    precision = [index.products[i].precision.value for i in ids.tolist()]
    core = [Precision.TF32.value if f else p for f, p in zip(tf32.tolist(), precision, strict=True)]
    times, flags = t.tolist(), unaligned.tolist()
    ends = [*starts.tolist()[1:], len(ids)]
    columns: dict[str, list[Any]] = {
        "ops": np.diff([*starts.tolist(), len(ids)]).tolist(),
        "flops": per_step(index.flops[ids]),
        "bytes": per_step(index.bytes[ids]),
        "time_s": [x * US for x in per_step(t)],
        "by_precision": [
            _seconds_by(precision[a:b], times[a:b])
            for a, b in zip(starts.tolist(), ends, strict=True)
        ],
        "unaligned_s": [x * US for x in per_step(np.where(unaligned, t, 0.0))],
        "unaligned_by_precision": [
            _seconds_by(
                [c for c, u in zip(core[a:b], flags[a:b], strict=True) if u],
                [x for x, u in zip(times[a:b], flags[a:b], strict=True) if u],
            )
            for a, b in zip(starts.tolist(), ends, strict=True)
        ],
    }
    if index.sol_s is not None and index.memory_bound is not None:
        sol = index.sol_s[ids]
        columns["hardware"] = [index.hardware] * len(steps)
        columns["sol_s"] = per_step(sol)
        columns["memory_bound_s"] = [
            x * US for x in per_step(np.where(index.memory_bound[ids], t, 0.0))
        ]
        columns["unaligned_excess_s"] = [
            x * US - y
            for x, y in zip(
                per_step(np.where(unaligned, t, 0.0)),
                per_step(np.where(unaligned, sol, 0.0)),
                strict=True,
            )
        ]
        columns["tf32_ops"] = per_step(tf32.astype(np.int64))
    return records(MatmulStats, columns, len(steps))


def _stats(index: MatmulIndex, op_ids: IntArray, time_us: FloatArray, points: bool) -> MatmulStats:
    """A window's MatmulStats from its products (`op_ids`, ascending) and their time."""
    unaligned = index.unaligned[op_ids]
    tf32 = index.tf32[op_ids] if index.tf32 is not None else np.zeros(len(op_ids), bool)
    core = [
        Precision.TF32.value if t else index.products[i].precision.value
        for i, t in zip(op_ids, tf32, strict=True)
    ]
    placed: dict[str, Any] = {}
    if index.sol_s is not None and index.memory_bound is not None:
        sol = index.sol_s[op_ids]
        placed = {
            "hardware": index.hardware,
            "sol_s": float(sol.sum()),
            "memory_bound_s": float(time_us[index.memory_bound[op_ids]].sum()) * US,
            "unaligned_excess_s": float(time_us[unaligned].sum()) * US
            - float(sol[unaligned].sum()),
            "tf32_ops": int(tf32.sum()),
        }
    return MatmulStats(
        ops=len(op_ids),
        flops=float(index.flops[op_ids].sum()),
        bytes=float(index.bytes[op_ids].sum()),
        time_s=float(time_us.sum()) * US,
        by_precision=_seconds_by([index.products[i].precision.value for i in op_ids], time_us),
        unaligned_s=float(time_us[unaligned].sum()) * US,
        unaligned_by_precision=_seconds_by(
            [c for c, u in zip(core, unaligned, strict=True) if u], time_us[unaligned]
        ),
        points=_points(index, op_ids, time_us, core) if points else (),
        **placed,
    )


def _points(
    index: MatmulIndex, op_ids: IntArray, time_us: FloatArray, core: list[str]
) -> tuple[MatmulPoint, ...]:
    """The window's longest products, one by one (ties in the order they ran)."""
    longest = np.argsort(-time_us, kind="stable")[:POINTS_KEPT]
    points = []
    for j in longest:
        i = int(op_ids[j])
        p = index.products[i]
        points.append(
            MatmulPoint(
                name=index.names[i] if index.names else "",
                shape=f"{p.batch}×{p.m}×{p.k}×{p.n}",
                precision=core[j],
                flops=float(index.flops[i]),
                bytes=float(index.bytes[i]),
                time_s=float(time_us[j]) * US,
                sol_s=None if index.sol_s is None else float(index.sol_s[i]),
            )
        )
    return tuple(points)


def _index(ctx: TraceContext) -> MatmulIndex | None:
    return matmul_index(ctx.trace, ctx.device)


def _matmuls(w: WindowContext) -> MatmulStats | None:
    # Products one by one for the whole trace only (its window has no step number):
    # what a report draws, where every step's would repeat them.
    whole = w.window.number is None
    index = w.trace.once(_index)
    if index is not None and index.host_start_us is not None:
        return host_matmul_stats(index, w.window.start_us, w.window.end_us)
    return matmul_stats(index, w.rows, w.trace.device.dur_us, points=whole)


def _describe(m: MatmulStats | None) -> Shown:
    """One line on the window's matrix products: work, rate, and where they stand."""
    if m is None:
        return ()
    spans: list[str | Value] = [
        f"{m.ops} products, ",
        Value(m.flops, Unit.FLOPS),
        " in ",
        Value(m.time_s, Unit.SECONDS),
        " of CPU ops: " if m.on_host else " of kernels: ",
        Value(m.flops_per_s, Unit.FLOP_RATE),
    ]
    sol = m.fraction_of_sol
    if sol is not None:
        spans += ["; ", Value(sol, Unit.FRACTION), f" of their speed of light on {m.hardware}"]
        if m.tf32_ops:
            spans.append(f"; {m.tf32_ops} fp32 products faster than the fp32 peak (TF32)")
    if m.memory_bound_s:
        spans += [
            "; ",
            Value(m.memory_bound_s / m.time_s, Unit.FRACTION),
            " of their time memory-bound",
        ]
    if m.unaligned_s:
        spans += [
            "; ",
            Value(m.unaligned_s / m.time_s, Unit.FRACTION),
            " of it in shapes tensor cores cannot fully use",
        ]
    return [("matmuls", line(*spans))]


def _matmuls_steps(sc: StepsContext) -> list[MatmulStats | None]:
    ctx = sc.trace
    index = ctx.once(_index)
    if index is not None and index.host_start_us is not None:
        return [host_matmul_stats(index, w.window.start_us, w.window.end_us) for w in sc.windows]
    return matmul_stats_steps(index, sc.owner, sc.rows, ctx.device.dur_us, len(sc))


MATMULS = WindowAnalyzer(
    key="matmuls",
    analyse=_matmuls,
    analyse_steps=_matmuls_steps,
    data=Fields((("flops_per_s", "flops_per_s"), ("fraction_of_sol", "fraction_of_sol"))),
    describe=_describe,
)
