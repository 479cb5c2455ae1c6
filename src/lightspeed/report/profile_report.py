"""The report of a profile, built once as a Document: summary, phases, module tree, top
ops by headroom, memory, findings; its data is the profile JSON document."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed.analysis.diagnosis import shape_text
from lightspeed.analysis.profile_analysis import ProfileAnalysis
from lightspeed.analysis.step_roofline import Aggregate, OpAnalysis
from lightspeed.document import (
    Column,
    Document,
    Fields,
    Findings,
    Line,
    Section,
    Style,
    Table,
    Tree,
    Unit,
    Value,
    findings_data,
    line,
)
from lightspeed.facts.hardware import MemoryLevel, hardware_to_dict
from lightspeed.facts.profile import CarriedOps, FusionPrediction, Profile
from lightspeed.facts.records import MemoryBreakdown
from lightspeed.predict.fusion import fusion_verdict
from lightspeed.report.timing_report import (
    timing_data,
    workload_data,
    workload_line,
)
from lightspeed.rules import Bound

DOCUMENT = "profile"


def profile_document(analysis: ProfileAnalysis, *, top: int = 10, depth: int = 2) -> Document:
    """The profile's report: `top` ops by headroom, the module tree `depth` levels deep."""
    profile = analysis.profile
    sections: list[Any] = [] if profile.prediction is None else [_prediction(analysis)]
    sections += [
        _summary(analysis),
        _phases(analysis),
        _module_tree(analysis, depth),
        _top_ops(analysis, top),
    ]
    if profile.memory is not None:
        sections.append(_memory(profile.memory, profile.workload.parameter_count))
    sections.append(Findings(tuple(analysis.findings), empty="none."))
    return Document(
        kind=DOCUMENT,
        data=profile_data(analysis),
        sections=tuple(sections),
        warnings=() if profile.timing is None or _unmeasured(profile) else profile.timing.warnings,
    )


def profile_data(analysis: ProfileAnalysis) -> dict[str, Any]:
    """The JSON body of a profile: its facts, and what analysis derives from them."""
    profile = analysis.profile
    totals = analysis.totals
    timing = None if profile.timing is None else timing_data(profile.workload, profile.timing)
    return {
        "workload": workload_data(profile.workload),
        "hardware": hardware_to_dict(profile.hardware),
        "timing": timing,
        "totals": {
            "flops": totals.flops,
            "model_flops": totals.model_flops,
            "bytes": totals.bytes,
            "sol_time_s": totals.sol_time_s,
            "step_time_s": totals.step_time_s,
            "efficiency": totals.efficiency,
            "achieved_flops_per_s": totals.achieved_flops_per_s,
            "peak_flops_per_s": totals.peak_flops_per_s,
            "mfu": totals.mfu,
            "hfu": totals.hfu,
            "op_time_s": totals.op_time_s,
            "unknown_flops_time_s": totals.unknown_flops_time_s,
            "unknown_flops_share": totals.unknown_flops_share,
            "unknown_flops_ops": list(totals.unknown_flops_ops),
        },
        "phases": {p.value: _aggregate_data(agg) for p, agg in analysis.phases.items()},
        "modules": {path: _aggregate_data(agg) for path, agg in analysis.modules.items()},
        "op_time_source": profile.op_time_source.value,
        "profiled_step_s": profile.profiled_step_s,
        "unattributed_s": profile.unattributed_s,
        "ops": [_op_data(a) for a in analysis.ops],
        "memory": None if profile.memory is None else dataclasses.asdict(profile.memory),
        "bound": analysis.bound.value,
        "findings": findings_data(analysis.findings),
        "failure": profile.failure,
        "environment": {
            "torch_version": profile.torch_version,
            "cudnn_benchmark": profile.cudnn_benchmark,
        },
        "prediction": None
        if profile.prediction is None
        else {
            **dataclasses.asdict(profile.prediction),
            "changes": dict(profile.prediction.changes),
        },
    }


def _unmeasured(profile: Profile) -> bool:
    """Whether no step of `profile` was timed (shape-only: each op at its speed of
    light), so its timing's warnings about replicates and noise say nothing."""
    made = profile.prediction
    return made is not None and made.measured_step_time_s is None


def _prediction(analysis: ProfileAnalysis) -> Section:
    """How the profile was predicted: from what, by which rules, assuming what."""
    p = analysis.profile
    made = p.prediction
    assert made is not None
    change = ", ".join(f"--{name} {value}".strip() for name, value in made.changes.items())
    predicted = Value(p.step_time_s, Unit.SECONDS, style=Style.BOLD)
    rows: list[tuple[str, Line]] = [
        ("predicted with", line(change or "no change")),
        (
            (
                "measured step",
                line(
                    Value(made.measured_step_time_s, Unit.SECONDS),
                    f" on {made.source_hardware}, predicted ",
                    predicted,
                ),
            )
            if made.measured_step_time_s is not None
            else ("predicted step", line(predicted, " (nothing measured)"))
        ),
        ("validated", validated_line(made.validated)),
    ]
    if made.largest_batch_size is not None:
        rows.append(("largest batch", _largest_batch(made.largest_batch_size, p)))
    if made.fusion is not None:
        rows += _fusion_rows(made.fusion, p)
    rows += [("rule", line(rule)) for rule in made.rules]
    rows += [("assumption", line(assumption)) for assumption in made.assumptions]
    blocks: list[Fields | Table] = [Fields(tuple(rows))]
    if made.carried:
        blocks.append(carried_table(made.carried))
    if made.scans:
        blocks.append(scan_table([dataclasses.asdict(s) for s in made.scans]))
    return Section("Prediction", tuple(blocks))


def validated_line(validated: bool) -> Line:
    """Whether a kind of prediction has been checked against measurement, as a report
    says it."""
    return line(
        "yes: checked against measurement (docs/benchmarks.md)"
        if validated
        else Value("no: not yet checked against a measurement", style=Style.WARNING)
    )


def carried_table(
    carried: Sequence[CarriedOps], title: str = "Carried over by kind of op"
) -> Table:
    """How each kind of op of a prediction on other hardware was carried over, and how
    well that has been validated; the step last, in bold."""
    return Table(
        title=title,
        columns=tuple(Column(k, h, numeric=n, optional=o) for k, h, n, o in CARRIED_COLUMNS),
        rows=tuple(carried_cells(dataclasses.asdict(c)) for c in carried),
        caption=CARRIED_CAPTION,
        bold_rows=1 if carried[-1].kind == "step" else 0,
    )


def scan_table(scans: Sequence[Mapping[str, Any]]) -> Table:
    """Each RNN's backward predicted as a parallel scan (JSON objects of
    `ScannedBackward`): its shape, levels, extra work and times."""
    return Table(
        title="Backward as a parallel scan (BPPSA)",
        columns=tuple(Column(k, h, numeric=n, optional=o) for k, h, n, o in SCAN_COLUMNS),
        rows=tuple(scan_cells(s) for s in scans),
        caption=SCAN_CAPTION,
    )


# The scan table's columns, as (JSON key, header, numeric, optional).
SCAN_COLUMNS = (
    ("module", "RNN", False, False),
    ("shape", "T×B, H", False, False),
    ("levels", "levels", True, False),
    ("work", "work", True, False),
    ("measured_s", "measured", True, False),
    ("predicted_s", "as a scan", True, False),
    ("ordinary_s", "autograd, modelled", True, True),
    ("scan_s", "scan, modelled", True, True),
    ("per_kernel_s", "per kernel", True, True),
)
SCAN_CAPTION = (
    "levels: 2⌈log₂(T + 1)⌉ batched products instead of T dependent steps; work: the"
    " scan's FLOPs over autograd's; measured: the RNN's backward; as a scan: measured ×"
    " (scan / autograd) as modelled, each kernel at the larger of its speed of light and"
    " the measured cost of one of the backward's kernels (a fused backward, cuDNN's, is"
    " not modelled: its measured time stands for autograd's, and each of the scan's ops"
    " costs at least the step's time per op)"
)


def scan_cells(row: Mapping[str, Any]) -> tuple[Value | str, ...]:
    """One row of the scan table, from its JSON object, in `SCAN_COLUMNS` order."""
    return (
        str(row["module"]) or "(model)",
        f"{row['steps']}×{row['batch']}, {row['hidden']}",
        Value(row["levels"], Unit.INTEGER),
        Value(row["scan_flops"] / row["ordinary_flops"], Unit.NUMBER, spec=".1f", suffix="×"),
        Value(row["measured_s"], Unit.SECONDS),
        Value(row["predicted_s"], Unit.SECONDS, style=Style.BOLD),
        Value(row["ordinary_s"], Unit.SECONDS),
        Value(row["scan_s"], Unit.SECONDS),
        Value(row["per_kernel_s"], Unit.SECONDS),
    )


# The carried-ops table's columns, as (JSON key, header, numeric, optional), for every
# renderer; a narrow terminal drops the optional ones.
CARRIED_COLUMNS = (
    ("kind", "kind of op", False, False),
    ("ops", "ops", True, False),
    ("measured_s", "on the source", True, False),
    ("predicted_s", "on the target", True, False),
    ("median_error", "median error", True, False),
    ("worst_error", "worst error", True, True),
    ("pairs", "pairs", True, True),
    ("rule", "rule", False, True),
)
CARRIED_CAPTION = (
    "error: |predicted − measured| / measured of that kind of prediction over the pairs of"
    " GPUs compared, leave-one-GPU-out (docs/benchmarks.md); — : not validated"
)


def carried_cells(row: Mapping[str, Any]) -> tuple[Value | str, ...]:
    """One row of the carried-ops table, from its JSON object, in `CARRIED_COLUMNS`
    order."""
    found = row.get("validation") or {}
    return (
        str(row["kind"]),
        Value(row["ops"], Unit.INTEGER),
        Value(row["measured_s"], Unit.SECONDS),
        Value(row["predicted_s"], Unit.SECONDS),
        Value(found.get("median_error"), Unit.FRACTION),
        Value(found.get("worst_error"), Unit.FRACTION),
        Value(found.get("pairs"), Unit.COUNT),
        str(row["rule"]),
    )


# The by-batch table's columns, as (JSON key, header, numeric), for every renderer.
BATCH_COLUMNS = (
    ("batch_size", "batch", True),
    ("step_time_s", "step", True),
    ("samples_per_s", "samples/s", True),
    ("peak_bytes", "peak memory", True),
    ("fits", "fits", False),
)


def with_batch_sizes(doc: Document, predictions: Sequence[Profile]) -> Document:
    """`doc` (the report of the last of `predictions`) with a table of every predicted
    batch size's step, throughput, peak memory and whether it fits, first; its JSON
    under `batch_sizes`."""
    data = [_batch_data(p) for p in predictions]
    table = Table(
        title="Predicted by batch size (the details below: the last)",
        columns=tuple(Column(key, header, numeric=n) for key, header, n in BATCH_COLUMNS),
        rows=tuple(batch_cells(row) for row in data),
    )
    return dataclasses.replace(
        doc, data={**doc.data, "batch_sizes": data}, sections=(table, *doc.sections)
    )


def batch_cells(row: Mapping[str, Any]) -> tuple[Value | str, ...]:
    """One row of the by-batch table, from its JSON object, in `BATCH_COLUMNS` order."""
    fits = row["fits"]
    return (
        Value(row["batch_size"], Unit.INTEGER),
        Value(row["step_time_s"], Unit.SECONDS),
        Value(row["samples_per_s"], Unit.COUNT),
        Value(row["peak_bytes"], Unit.BYTES),
        "—" if fits is None else ("yes" if fits else "no"),
    )


def _batch_data(p: Profile) -> dict[str, Any]:
    step, batch = p.step_time_s, p.workload.batch_size
    peak = None if p.memory is None else p.memory.peak_bytes
    memory = p.hardware.memory_bytes
    return {
        "batch_size": batch,
        "step_time_s": step,
        "samples_per_s": p.workload.samples_per_step / step if step else None,
        "peak_bytes": peak,
        "fits": None if peak is None or not memory else peak <= memory,
    }


def _fusion_rows(f: FusionPrediction, profile: Profile) -> list[tuple[str, Line]]:
    """What fusing the jobs gains, and whether it is worth it, said plainly."""
    rows: list[tuple[str, Line]] = [
        (
            "fused jobs",
            line(
                f"{f.jobs} jobs in one step ",
                Value(f.fused_step_s, Unit.SECONDS),
                ", one after another ",
                Value(f.serial_step_s, Unit.SECONDS),
                ": ",
                Value(f.speedup, Unit.NUMBER, spec=".2f", suffix="×", style=Style.BOLD),
                " the throughput",
            ),
        ),
        (
            "fusion verdict",
            line(
                Value(
                    fusion_verdict(f.helps, f.overhead_share, f.jobs),
                    style=Style.PLAIN if f.helps else Style.WARNING,
                )
            ),
        ),
    ]
    if f.largest_jobs is not None:
        rows.append(
            (
                "largest K",
                line(
                    Value(f.largest_jobs, Unit.INTEGER, style=Style.BOLD),
                    " jobs fit in ",
                    Value(profile.hardware.memory_bytes, Unit.BYTES),
                ),
            )
        )
    return rows


def _largest_batch(samples: int, profile: Profile) -> Line:
    memory = Value(profile.hardware.memory_bytes, Unit.BYTES)
    if samples == 0:
        return line(
            Value("none", style=Style.WARNING), ": one sample's step already exceeds the ", memory
        )
    return line(Value(samples, Unit.INTEGER, style=Style.BOLD), " samples fit in ", memory)


def _aggregate_data(agg: Aggregate) -> dict[str, Any]:
    return {
        "flops": agg.flops,
        "bytes": agg.bytes,
        "time_s": agg.time_s,
        "sol_time_s": agg.sol_time_s,
        "op_count": agg.op_count,
    }


def _op_data(a: OpAnalysis) -> dict[str, Any]:
    facts = dataclasses.asdict(a.op)
    facts["phase"] = a.op.phase.value
    return {
        **facts,
        "bytes": a.op.bytes,
        "precision": a.precision.value,
        "sol_time_s": a.sol_time_s,
        "efficiency": a.efficiency,
        "bound": None if a.bound is None else a.bound.value,
        "memory_level": a.memory_level.value,
    }


def _summary(analysis: ProfileAnalysis) -> Section:
    p = analysis.profile
    t = analysis.totals
    wl = p.workload
    rows: list[tuple[str, Line]] = [
        ("workload", workload_line(wl)),
        ("hardware", line(f"{p.hardware.name} ({p.hardware.id})")),
    ]
    if p.timing is not None:
        m = p.timing
        rows.append(
            (
                "step time",
                line(
                    Value(m.median_s, Unit.SECONDS),
                    " median (IQR ",
                    Value(m.iqr_s, Unit.SECONDS),
                    f", n={m.n}), ",
                    Value(m.per_second(wl.samples_per_step), Unit.NUMBER, ",.1f", " samples/s"),
                ),
            )
        )
    rows += [
        (
            "work",
            line(
                Value(t.flops, Unit.FLOPS),
                " (",
                Value(t.model_flops, Unit.FLOPS),
                " forward + backward), ",
                Value(t.bytes, Unit.BYTES),
                " moved",
            ),
        ),
        ("speed of light", line(Value(t.sol_time_s, Unit.SECONDS))),
    ]
    if t.unknown_flops_time_s:
        rows.append(
            (
                "unknown FLOPs",
                line(
                    Value(t.unknown_flops_share, Unit.FRACTION),
                    f" of op time, in {', '.join(t.unknown_flops_ops)}",
                ),
            )
        )
    if t.efficiency is not None:
        rows.append(
            (
                "of speed of light",
                line(
                    Value(t.efficiency, Unit.FRACTION, style=Style.BOLD),
                    "  (achieved ",
                    Value(t.achieved_flops_per_s or 0, Unit.FLOP_RATE),
                    ")",
                ),
            )
        )
        rows.append(
            (
                "MFU / HFU",
                line(
                    Value(t.mfu or 0, Unit.FRACTION),
                    " / ",
                    Value(t.hfu or 0, Unit.FRACTION),
                    " of ",
                    Value(t.peak_flops_per_s, Unit.FLOP_RATE),
                ),
            )
        )
    rows.append(("bound", line(Value(analysis.bound.value, style=Style.BOLD))))
    if p.profiled_step_s:
        rows.append(
            (
                "unattributed",
                line(
                    Value(p.unattributed_s or 0, Unit.SECONDS),
                    " of the ",
                    Value(p.profiled_step_s, Unit.SECONDS),
                    " profiled step ran outside captured ops",
                ),
            )
        )
    if p.failure:
        rows.append(("stopped", line(Value(p.failure, style=Style.ERROR))))
    return Section("Speed of light", (Fields(tuple(rows)),))


_AGGREGATE_COLUMNS = (
    Column("flops", "FLOPs", numeric=True),
    Column("bytes", "bytes", numeric=True),
    Column("time_s", "time", numeric=True),
    Column("sol_time_s", "SoL", numeric=True),
    Column("efficiency", "of SoL", numeric=True),
)


def _aggregate_row(name: str, agg: Aggregate) -> tuple[Value | str, ...]:
    return (
        name,
        Value(agg.flops, Unit.FLOPS),
        Value(agg.bytes, Unit.BYTES),
        Value(agg.time_s or None, Unit.SECONDS),
        Value(agg.sol_time_s, Unit.SECONDS),
        Value(agg.efficiency, Unit.FRACTION),
    )


def _phases(analysis: ProfileAnalysis) -> Table:
    return Table(
        title="Phases (op times from the profiled run)",
        columns=(Column("phase", "phase"), *_AGGREGATE_COLUMNS),
        rows=tuple(_aggregate_row(p.value, agg) for p, agg in analysis.phases.items()),
    )


def _module_tree(analysis: ProfileAnalysis, depth: int) -> Section:
    """Modules as a tree, `depth` levels below the root, each with its subtree's totals."""
    modules = analysis.modules

    def label(name: str, agg: Aggregate) -> Line:
        return line(
            f"{name}  ",
            Value(agg.flops, Unit.FLOPS),
            ", ",
            Value(agg.time_s or None, Unit.SECONDS),
            ", SoL ",
            Value(agg.sol_time_s, Unit.SECONDS),
        )

    children: dict[str, list[str]] = {}
    for path in sorted(p for p in modules if p and not p.startswith("(")):
        if path.count(".") + 1 <= depth:
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            children.setdefault(parent, []).append(path)

    def node(path: str) -> Tree:
        return Tree(label(path, modules[path]), tuple(node(c) for c in children.get(path, ())))

    # Ops outside the model (the optimizer) hang off the root.
    outside = tuple(Tree(label(p, modules[p])) for p in modules if p.startswith("("))
    root = Tree(
        label(f"{analysis.profile.workload.name} (whole step)", modules.get("", Aggregate())),
        tuple(node(c) for c in children.get("", ())) + outside,
    )
    return Section(f"Modules (depth {depth})", (root,))


def bound_label(bound: Bound | None, level: MemoryLevel) -> str:
    """An op's bound as reports show it: a memory bound whose roof is the cache says
    `cache`; an op with no work, `—`."""
    if bound is None:
        return "—"
    if bound is Bound.MEMORY and level is MemoryLevel.CACHE:
        return "cache"
    return bound.value


def _top_ops(analysis: ProfileAnalysis, n: int) -> Table:
    top = analysis.top(n)
    rows = [
        [
            a.op.name.removeprefix("aten::"),
            a.op.module or "(root)",
            a.op.phase.value,
            shape_text(a.op),
            Value(a.time_s or 0, Unit.SECONDS),
            Value(a.sol_time_s, Unit.SECONDS),
            Value(a.efficiency, Unit.FRACTION),
            bound_label(a.bound, a.memory_level),
        ]
        for a in top
    ]
    # Calls alike in op, module and phase (a layer run twice, or the two products of a
    # linear layer's backward) read apart by the order they ran in, even where the
    # terminal has no room for their shapes.
    alike = Counter(tuple(row[:3]) for row in rows)
    seen: Counter[tuple[object, ...]] = Counter()
    for _, row in sorted(zip(top, rows, strict=True), key=lambda pair: pair[0].op.index):
        key = tuple(row[:3])
        if alike[key] > 1:
            seen[key] += 1
            row[0] = f"{row[0]} #{seen[key]}"
    return Table(
        title=f"Top {n} ops by headroom: where to look first",
        columns=(
            Column("op", "op", shrink=True),
            Column("module", "module", shrink=True),
            Column("phase", "phase", min_width=9),
            Column("shapes", "input shapes", shrink=True, optional=True),
            Column("time_s", "time", numeric=True, min_width=7),
            Column("sol_time_s", "SoL", numeric=True, min_width=7),
            Column("efficiency", "of SoL", numeric=True, min_width=6),
            Column("bound", "bound", min_width=7),
        ),
        rows=tuple(tuple(row) for row in rows),
    )


def _memory(m: MemoryBreakdown, parameter_count: int | None) -> Table:
    caption = None
    if parameter_count:
        state = m.parameters_bytes + m.gradients_bytes + m.optimizer_state_bytes
        caption = f"training state: {state / parameter_count:.1f} bytes per parameter"
    rows: list[tuple[Value | str, ...]] = [
        (
            name.replace("_", " "),
            Value(size, Unit.BYTES),
            Value(m.at_peak_bytes.get(name, 0), Unit.BYTES),
        )
        for name, size in m.categories().items()
    ]
    rows.append(("peak", "", Value(m.peak_bytes, Unit.BYTES)))
    return Table(
        title=f"Memory ({m.method})",
        columns=(
            Column("category", "category"),
            Column("bytes", "size", numeric=True),
            Column("at_peak_bytes", "live at peak", numeric=True),
        ),
        rows=tuple(rows),
        caption=caption,
        bold_rows=1,
    )
