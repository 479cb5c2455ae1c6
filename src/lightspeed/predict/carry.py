"""A changed step's op times, carried over from the measured step it changes.

A change that the step's shapes show — another batch size, autocast, checkpointed
modules — is analysed exactly on fake tensors (`measure.shape_only`): every op of the
changed step with its FLOPs, bytes and memory. What fake tensors cannot give is time.
Each op of the changed step takes it from its counterpart in the measured profile, on
the same hardware:

- the op at the same place (the k-th call of that name in that module and phase) was
  measured with the same input shapes and dtypes: it takes that op's time, so a step
  predicted with no change is the measured one;
- else the same op (module, name, input shapes and dtypes) was measured elsewhere (a
  checkpointed module's forward, run again in backward): it takes the median time of
  those measurements;
- else the op at the same place (the k-th call of that name in that module and phase)
  was measured with other shapes or dtypes: a matrix product or convolution whose
  kernel was timed one by one before and after (on the device at hand) adds the
  difference at another size, t' = t + (k' − k), as the time an op takes in a step
  beyond its kernel alone (dispatch, the profiler's record: tens of µs) does not grow
  with its size; in another precision, where the kernel itself is another, it scales
  by their ratio, t' = t · k' / k. Any other op keeps a fixed per-op overhead and the
  rest of its time scales with the speed of light, so its efficiency carries over:
  t' = min(t, c) + max(t − c, 0) · SoL' / SoL;
- else (an op the change adds, such as autocast's casts): the per-op overhead plus its
  speed of light at the median efficiency of the measured ops of its name, or of all
  of them.

The per-op overhead `c` is the profile's own: the median time of its ops that compute
and move nothing (views), which is what the host spends to dispatch an op. Sizes are
compared on one roof: the speed of light from the device's memory, never from a cache
its bytes fit (`carry_sol_s`). An op whose bytes outgrow the last-level cache at the new
size would otherwise be scaled by the cache's bandwidth over the memory's as well as by
its bytes (19× for 4× the bytes of a log-softmax's backward, measured 3.5×): it had not
run at the cache's bandwidth to begin with. The time
outside ops (Python, the autograd engine) grows with the number of ops: a checkpointed
module's forward runs its Python code again. The step time moves by the change: the
measured step + (Σ t' + time outside ops') − (Σ t + time outside ops), or scaled by
their ratio where that would not be positive (`shifted_step`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from lightspeed.analysis.step_roofline import analyse_op
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Prediction, Profile
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.facts.timing import Measurement
from lightspeed.rules import Bound

RULES = (
    "the changed step's ops, FLOPs, bytes and memory: the step run on fake tensors with"
    " the change made (exact, nothing executed)",
    "an op measured with the same shapes and dtypes keeps its measured time (the median of"
    " its measurements, in any phase)",
    "an op measured at the same place with other shapes or dtypes keeps the profile's"
    " per-op overhead, and the rest of its time scales with its speed of light",
    "an op the change adds: the per-op overhead plus its speed of light at the median"
    " efficiency of the measured ops of its name",
    "the time outside ops (Python, the autograd engine) grows with the number of ops (a"
    " checkpointed module's forward runs its Python again)",
    "step time: the measured step plus the change in the profiled ops' time and the time"
    " outside them (the profiler's own cost is in both and cancels)",
)

TIMED_RULE = (
    "a matrix product or convolution whose kernel the change alters, timed one by one on"
    " this device before and after: its measured time plus the kernel's time after minus"
    " before at another size, times after over before in another precision"
)

_Signature = tuple[str, str, tuple[tuple[int, ...], ...], tuple[str, ...]]
# A kernel configuration: (op name, input shapes, input dtypes).
OpKey = tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]
# Seconds per call of kernel configurations timed one by one: (measured step, changed).
KernelTimes = tuple[Mapping[OpKey, float], Mapping[OpKey, float]]


def op_key(op: OpRecord) -> OpKey:
    """The kernel configuration `op` ran: its name, input shapes and dtypes."""
    return op.name, op.input_shapes, op.input_dtypes


def per_op_overhead_s(ops: Iterable[OpRecord]) -> float:
    """The median measured time of the ops that compute and move nothing (views), in
    seconds: the host's cost of dispatching one op; 0 when none was timed."""
    times = [op.time_s for op in ops if op.flops == 0 and op.bytes == 0 and op.time_s is not None]
    return statistics.median(times) if times else 0.0


def forward_s(profile: Profile, module: str, *, leaving_out: frozenset[str] = frozenset()) -> float:
    """Seconds of `module`'s forward (and its submodules') in the measured step: its ops'
    times and their share, by count, of the time outside ops, leaving out ops named in
    `leaving_out` ("aten::mm", ...)."""
    return ops_s(profile, [op for op in forward_ops(profile, module) if op.name not in leaving_out])


def forward_ops(profile: Profile, module: str) -> list[OpRecord]:
    """The ops of `module`'s forward (and its submodules') in the measured step."""
    return [
        op
        for op in profile.ops
        if op.phase is Phase.FORWARD and (op.module == module or op.module.startswith(module + "."))
    ]


def ops_s(profile: Profile, ops: Sequence[OpRecord]) -> float:
    """Seconds of some of the profile's ops: their times, and their share, by count, of
    the time outside ops."""
    outside = profile.unattributed_s or 0.0
    share = outside * len(ops) / len(profile.ops) if profile.ops else 0.0
    return sum(op.time_s or 0.0 for op in ops) + share


def carry_over(
    measured: Profile,
    changed: Profile,
    changes: Mapping[str, str],
    assumptions: Sequence[str] = (),
    kernel_times: KernelTimes | None = None,
    added_outside_s: float = 0.0,
    added_rules: Sequence[str] = (),
) -> Profile:
    """`changed` (a shape-only profile of the changed step, on `measured`'s hardware) with
    each op's time carried over from `measured` (see the module's docstring), its step
    time scaled, and a `Prediction` that names `changes`.

    `kernel_times`: (before, after), seconds per call of kernel configurations timed one
    by one on the device (`measure.op_bench`), of the measured step and of the changed
    one. A matrix product or convolution whose configuration changed then scales by
    their ratio, and an added op takes its own, in place of the roofline's rules.
    `added_outside_s`: seconds the change adds outside any op (checkpoint's own hooks),
    by the rules `added_rules` name."""
    hardware = measured.hardware
    overhead = per_op_overhead_s(measured.ops)
    same = _by_signature(measured.ops)
    marginal = marginal_cost(measured.ops, hardware)
    found_slowdowns = slowdowns(measured.ops, hardware, overhead)
    by_place = _by_place(measured.ops)
    seen: Counter[tuple[str, str, str]] = Counter()
    ops: list[OpRecord] = []
    for op in changed.ops:
        place = (op.phase.value, op.module, op.name)
        counterparts = by_place.get(place, [])
        k = seen[place]
        seen[place] += 1
        there = counterparts[k] if k < len(counterparts) else None
        times = same.get(_signature(op))
        if there is not None and there.time_s is not None and _signature(there) == _signature(op):
            time = there.time_s
        elif times:
            time = statistics.median(times)
        elif there is not None and there.time_s is not None:
            timed = _timed(kernel_times, there, op)
            time = (
                timed
                if timed is not None
                else _scaled(there, op, hardware, overhead, marginal.get(op.name))
            )
        elif kernel_times is not None and op_key(op) in kernel_times[1]:
            time = kernel_times[1][op_key(op)]
        else:
            time = added_op_time(op, found_slowdowns, hardware, overhead)
        ops.append(dataclasses.replace(op, time_s=time))
    outside = measured.unattributed_s
    if outside is not None and measured.ops:
        outside *= len(ops) / len(measured.ops)
    if added_outside_s:
        outside = (outside or 0.0) + added_outside_s
    timing, profiled = shifted_step(measured, ops, outside)
    rules = RULES if kernel_times is None else (*RULES[:2], TIMED_RULE, *RULES[2:])
    rules = (*rules, *added_rules)
    return dataclasses.replace(
        changed,
        ops=tuple(ops),
        timing=timing,
        op_time_source=measured.op_time_source,
        profiled_step_s=profiled,
        unattributed_s=outside,
        prediction=Prediction(
            changes=dict(changes),
            source_hardware=hardware.id,
            measured_step_time_s=measured.step_time_s,
            rules=rules,
            assumptions=tuple(assumptions),
        ),
    )


def scaled_step(
    measured: Profile, ops: Sequence[OpRecord], outside_s: float | None = None
) -> tuple[Measurement | None, float | None]:
    """The timing and profiled step time of `measured` with its ops' times replaced by
    those of `ops`, and its time outside ops by `outside_s` (None: kept): every step time
    scaled by (Σ t' + outside') / (Σ t + outside)."""
    outside = measured.unattributed_s or 0.0
    outside_after = outside if outside_s is None else outside_s
    before = sum(op.time_s or 0.0 for op in measured.ops) + outside
    after = sum(op.time_s or 0.0 for op in ops) + outside_after
    scale = after / before if before > 0 else 1.0
    timing = measured.timing
    if timing is not None:
        timing = dataclasses.replace(timing, times_s=tuple(t * scale for t in timing.times_s))
    profiled = measured.profiled_step_s
    return timing, None if profiled is None else profiled * scale


def shifted_step(
    measured: Profile, ops: Sequence[OpRecord], outside_s: float | None
) -> tuple[Measurement | None, float | None]:
    """The timing and profiled step time of `measured` with its ops' times replaced by
    those of `ops` and its time outside ops by `outside_s` (None: kept): every step time
    t becomes t + (after − before), where before and after are Σ op times + time outside
    ops, or t · after / before where that would not be positive. The change is added,
    not scaled: the profiled run's own cost (the profiler's, per op) is in both sums and
    cancels, where a ratio would dilute the change by it."""
    outside = measured.unattributed_s or 0.0
    outside_after = outside if outside_s is None else outside_s
    before = sum(op.time_s or 0.0 for op in measured.ops) + outside
    after = sum(op.time_s or 0.0 for op in ops) + outside_after
    ratio = after / before if before > 0 else 1.0

    def moved(t: float) -> float:
        shifted = t + after - before
        return shifted if shifted > 0 else t * ratio

    timing = measured.timing
    if timing is not None:
        timing = dataclasses.replace(timing, times_s=tuple(moved(t) for t in timing.times_s))
    profiled = measured.profiled_step_s
    return timing, None if profiled is None else moved(profiled)


def _signature(op: OpRecord) -> _Signature:
    return (op.module, op.name, op.input_shapes, op.input_dtypes)


def _by_signature(ops: Iterable[OpRecord]) -> dict[_Signature, list[float]]:
    times: dict[_Signature, list[float]] = defaultdict(list)
    for op in ops:
        if op.time_s is not None:
            times[_signature(op)].append(op.time_s)
    return times


def _by_place(ops: Iterable[OpRecord]) -> dict[tuple[str, str, str], list[OpRecord]]:
    places: dict[tuple[str, str, str], list[OpRecord]] = defaultdict(list)
    for op in ops:
        places[(op.phase.value, op.module, op.name)].append(op)
    return places


def _timed(kernel_times: KernelTimes | None, before: OpRecord, after: OpRecord) -> float | None:
    """`after`'s time from `before`'s measured one and their kernels timed one by one: at
    another size in the same dtypes, plus how much longer its kernel took; in other dtypes
    (another kernel altogether: autocast's bf16 path packs its inputs its own way), times
    their ratio, as where the difference would leave nothing."""
    # Only a matrix product's or convolution's speed is its kernel's own (its blocking for
    # the shape, its bf16 path); other ops follow their bytes on the roofline, which a
    # kernel timed alone, its inputs hot in cache, does not see.
    if kernel_times is None or after.macs is None or before.time_s is None:
        return None
    was, now = kernel_times[0].get(op_key(before)), kernel_times[1].get(op_key(after))
    if not was or now is None:
        return None
    added = before.time_s + now - was
    if added > 0 and before.input_dtypes == after.input_dtypes:
        return added
    return before.time_s * now / was


def _scaled(
    before: OpRecord,
    after: OpRecord,
    hardware: Hardware,
    overhead: float,
    marginal: float | None,
) -> float:
    assert before.time_s is not None
    sol_before = carry_sol_s(before, hardware)
    if sol_before <= 0:
        return before.time_s
    sol_after = carry_sol_s(after, hardware)
    if marginal is not None:
        return max(
            before.time_s + marginal * (sol_after - sol_before), min(before.time_s, overhead)
        )
    work = max(before.time_s - overhead, 0.0)
    return min(before.time_s, overhead) + work * sol_after / sol_before


def carry_sol_s(op: OpRecord, hardware: Hardware) -> float:
    """`op`'s speed of light on `hardware`, in seconds, with its bytes from the device's
    memory even where they fit a cache: the one roof that sizes are carried on (see the
    module's docstring)."""
    return analyse_op(op, _one_roof(hardware)).sol_time_s


def _one_roof(hardware: Hardware) -> Hardware:
    """`hardware` with no cache roof: every op's bytes from its memory."""
    if hardware.cache_bytes is None:
        return hardware
    # Hardware holds mappings, so it is not hashable: keep the last one made.
    if _UNCACHED and _UNCACHED[0][0] is hardware:
        return _UNCACHED[0][1]
    found = dataclasses.replace(hardware, cache_bytes=None, cache_bandwidth_bytes_per_s=None)
    _UNCACHED[:] = [(hardware, found)]
    return found


_UNCACHED: list[tuple[Hardware, Hardware]] = []


# The fewest timed ops of one name, and the widest spread of their speeds of light
# (largest over smallest), that the time added per second of speed of light is fitted on.
_FIT_MIN_OPS = 3
_FIT_MIN_SPREAD = 2.0


def marginal_cost(ops: Iterable[OpRecord], hardware: Hardware) -> dict[str, float]:
    """Seconds each op name takes per second of added speed of light, fitted on the
    profile's own ops of that name (least squares of time against speed of light:
    the slope; the intercept is the name's fixed cost, a convolution's set-up say).
    Names with too few ops, or too narrow a spread of sizes, or a slope that is not
    positive, are left out."""
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for op in ops:
        if op.time_s is None:
            continue
        sol = carry_sol_s(op, hardware)
        if sol > 0:
            points[op.name].append((sol, op.time_s))
    slopes = {}
    for name, pairs in points.items():
        sols = [x for x, _ in pairs]
        if len(pairs) < _FIT_MIN_OPS or max(sols) < _FIT_MIN_SPREAD * min(sols):
            continue
        mean_x = statistics.fmean(sols)
        mean_y = statistics.fmean(t for _, t in pairs)
        spread = sum((x - mean_x) ** 2 for x in sols)
        slope = sum((x - mean_x) * (t - mean_y) for x, t in pairs) / spread
        if mean_y - slope * mean_x < 0:  # a negative fixed cost: time in proportion
            slope = sum(t for _, t in pairs) / sum(sols)
        if slope > 0:
            slopes[name] = slope
    return slopes


def added_op_time(
    op: OpRecord, slowdowns: Mapping[str, list[float]], hardware: Hardware, overhead: float
) -> float:
    """Seconds an op the measured step did not run takes: `overhead` plus its speed of
    light at the median `slowdowns` of the ops of its name, or of all of them (1 where
    there are none)."""
    sol = carry_sol_s(op, hardware)
    if sol <= 0:
        return overhead
    found = slowdowns.get(op.name) or [x for xs in slowdowns.values() for x in xs]
    return overhead + sol * (statistics.median(found) if found else 1.0)


def slowdowns(
    ops: Iterable[OpRecord], hardware: Hardware, overhead: float
) -> dict[str, list[float]]:
    """Each timed op's time beyond the per-op overhead over its speed of light, by op
    name, for the ops bound by compute or memory: an op bound by its per-op cost took
    thousands of times its speed of light, which says nothing of how fast a larger one
    runs."""
    found: dict[str, list[float]] = defaultdict(list)
    for op in ops:
        if op.time_s is None:
            continue
        placed = analyse_op(op, _one_roof(hardware))
        if placed.sol_time_s > 0 and placed.bound in (Bound.COMPUTE, Bound.MEMORY):
            found[op.name].append(max(op.time_s - overhead, 0.0) / placed.sol_time_s)
    return found
