"""The HTML report of a profile, drawn from its JSON document alone: header, the
roofline, time by phase and by module against their speed of light, memory by category
and over the step, every op in a sortable table, and the findings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed import units
from lightspeed.analysis.diagnosis import shapes_text
from lightspeed.document import Unit, Value
from lightspeed.dtypes import Precision, StepDtype
from lightspeed.predict.fusion import fusion_verdict
from lightspeed.report.html import roofline
from lightspeed.report.html.markup import Column, Markup, Page, fields, findings, label, notes, text
from lightspeed.report.html.memory_charts import memory_charts
from lightspeed.report.html.op_table import op_label, op_table
from lightspeed.report.profile_report import (
    BATCH_COLUMNS,
    CARRIED_CAPTION,
    CARRIED_COLUMNS,
    SCAN_CAPTION,
    SCAN_COLUMNS,
    batch_cells,
    carried_cells,
    scan_cells,
)


def profile_page(doc: Mapping[str, Any]) -> Page:
    """A profile's report."""
    wl = doc["workload"]
    made = doc.get("prediction")
    kind = "predicted profile" if made else "speed-of-light profile"
    page = Page(f"{wl['name']}: {kind}")
    if made:
        page.section("Prediction", *_prediction(page, doc, made), anchor="prediction")
    if doc.get("batch_sizes"):
        page.section("By batch size", *_batch_sizes(page, doc["batch_sizes"]), anchor="batches")
    page.section("Summary", summary(doc), anchor="summary")
    rl = profile_roofline(doc)
    chart = page.chart(
        "roofline",
        roofline.figure(rl, group_title="phase"),
        caption=f"Each op with FLOPs, bytes and a time, sized by its time; {rl.left_out}"
        " ops without all three are in the op table only. Click a phase in the legend"
        " to hide or show it; choose a module above to keep its ops.",
    )
    page.section("Roofline", _module_filter(page.last_chart_id, doc), chart, anchor="roofline")
    page.section(
        "Time against the speed of light",
        page.chart("phases", phases_figure(doc.get("phases") or {})),
        page.chart(
            "modules",
            _modules_figure(doc),
            caption="Area: time; colour: the fraction of the speed of light. Click a module"
            " to drill into it, the centre to go back up; hover for its time, speed of light"
            " and FLOPs.",
        ),
        anchor="time",
    )
    if doc.get("memory"):
        page.section("Memory", *memory_charts(page, doc["memory"]), anchor="memory")
    page.section("Ops", op_table(page, doc), anchor="ops")
    page.section("Findings", findings(doc.get("findings") or []), anchor="findings")
    return page


def validated_text(made: Mapping[str, Any]) -> str:
    """Whether a prediction (JSON) of its kind has been checked against measurement."""
    if made.get("validated"):
        return "yes: checked against measurement"
    return "no: not yet checked against a measurement"


def carried_parts(page: Page, made: Mapping[str, Any]) -> list[Markup]:
    """A prediction's (JSON) kinds of op carried over to other hardware: the table and
    what each kind was validated against; nothing when the hardware did not change."""
    carried = made.get("carried") or []
    if not carried:
        return []
    return [
        page.table(
            [Column(key, header, numeric) for key, header, numeric, _ in CARRIED_COLUMNS],
            [carried_cells(row) for row in carried],
            caption=f"Carried over from {made.get('source_hardware')}. {CARRIED_CAPTION}",
            kind="carried",
        ),
        notes(
            [
                f"{row['kind']}: {row['validation']['data']}"
                for row in carried
                if row.get("validation")
            ],
            title="Validated against",
        ),
    ]


def scan_parts(page: Page, made: Mapping[str, Any]) -> list[Markup]:
    """A prediction's (JSON) RNN backwards as parallel scans: the table, and each RNN's
    dependent steps and backward time both ways; nothing when not asked."""
    scans = made.get("scans") or []
    if not scans:
        return []
    names = [label(s["module"] or "(model)") for s in scans]
    return [
        page.table(
            [Column(key, header, numeric) for key, header, numeric, _ in SCAN_COLUMNS],
            [scan_cells(row) for row in scans],
            caption=SCAN_CAPTION,
            kind="scans",
        ),
        page.chart(
            "scans",
            {
                "data": [
                    {
                        "type": "bar",
                        "name": name,
                        "x": names,
                        "y": [s[key] for s in scans],
                        "hovertemplate": f"%{{x}}: %{{y:.3s}}s ({name})<extra></extra>",
                    }
                    for name, key in (
                        ("backward measured (autograd)", "measured_s"),
                        ("predicted as a scan", "predicted_s"),
                    )
                ],
                "layout": {
                    "title": {"text": "Each RNN's backward: measured, and as a scan"},
                    "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
                    "barmode": "group",
                    "height": 320,
                },
            },
        ),
    ]


def _prediction(page: Page, doc: Mapping[str, Any], made: Mapping[str, Any]) -> list[Markup]:
    """How the profile was predicted, and its step beside the measured one."""
    timing = doc.get("timing") or {}
    measured, predicted = made.get("measured_step_time_s"), timing.get("median_s")
    source, target = made.get("source_hardware"), doc["hardware"]["id"]
    change = ", ".join(f"--{k} {v}".strip() for k, v in (made.get("changes") or {}).items())
    parts = [
        fields(
            [
                ("predicted with", change or "no change"),
                ("measured step", Value(measured, Unit.SECONDS, suffix=f" on {source}")),
                ("predicted step", Value(predicted, Unit.SECONDS, suffix=f" on {target}")),
                ("largest batch", Value(made.get("largest_batch_size"), Unit.INTEGER)),
                ("validated", validated_text(made)),
            ]
        ),
        notes(list(made.get("rules") or []), title="Rules"),
        notes(list(made.get("assumptions") or []), title="Assumptions"),
    ]
    parts += carried_parts(page, made)
    parts += scan_parts(page, made)
    fusion = made.get("fusion")
    if fusion:
        parts[1:1] = _fusion(page, fusion)
    if measured and predicted:
        parts.insert(
            1,
            page.chart(
                "prediction",
                {
                    "data": [
                        {
                            "type": "bar",
                            "x": [label(f"measured on {source}"), label(f"predicted on {target}")],
                            "y": [measured, predicted],
                            "marker": {"color": ["#2b59c3", "#e6a23c"]},
                            "hovertemplate": "%{x}: %{y:.3s}s a step<extra></extra>",
                        }
                    ],
                    "layout": {
                        "title": {"text": "Step time: the measurement and the prediction"},
                        "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
                        "height": 320,
                    },
                },
            ),
        )
    return parts


def _fusion(page: Page, f: Mapping[str, Any]) -> list[Markup]:
    """What fusing K jobs gains: the fused step beside the K run one after another, and
    the verdict, said plainly."""
    k = f["jobs"]
    verdict = fusion_verdict(f["helps"], f["overhead_share"], k)
    return [
        fields(
            [
                ("fused jobs", Value(k, Unit.INTEGER)),
                ("one after another", Value(f["serial_step_s"], Unit.SECONDS)),
                ("fused step", Value(f["fused_step_s"], Unit.SECONDS)),
                ("speed-up", Value(f["speedup"], Unit.NUMBER, ".2f", suffix="×")),
                ("fusion verdict", verdict),
                ("largest K", Value(f.get("largest_jobs"), Unit.INTEGER)),
            ]
        ),
        page.chart(
            "fusion",
            {
                "data": [
                    {
                        "type": "bar",
                        "x": [label(f"{k} jobs one after another"), label(f"{k} jobs fused")],
                        "y": [f["serial_step_s"], f["fused_step_s"]],
                        "marker": {"color": ["#8a8f98", "#2b59c3"]},
                        "hovertemplate": "%{x}: %{y:.3s}s<extra></extra>",
                    }
                ],
                "layout": {
                    "title": {"text": f"{k} jobs: one after another, and fused (predicted)"},
                    "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
                    "height": 320,
                },
            },
        ),
    ]


def _batch_sizes(page: Page, rows: list[Mapping[str, Any]]) -> list[Markup]:
    """Each predicted batch size's step, throughput, peak memory and whether it fits."""
    columns = [Column(key, header, numeric) for key, header, numeric in BATCH_COLUMNS]
    cells = [batch_cells(r) for r in rows]
    batches = [label(r["batch_size"]) for r in rows]
    figure = {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": batches,
                "y": [r["samples_per_s"] for r in rows],
                "name": "samples/s",
                "hovertemplate": "batch %{x}: %{y:.3s} samples/s<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": batches,
                "y": [r["peak_bytes"] for r in rows],
                "name": "peak memory",
                "yaxis": "y2",
                "hovertemplate": "batch %{x}: %{y:.3s}B at the peak<extra></extra>",
            },
        ],
        "layout": {
            "title": {"text": "Predicted throughput and peak memory by batch size"},
            "xaxis": {"title": {"text": "batch size"}, "type": "category"},
            "yaxis": {"title": {"text": "samples/s"}, "exponentformat": "SI"},
            "yaxis2": {
                "title": {"text": "bytes"},
                "overlaying": "y",
                "side": "right",
                "exponentformat": "SI",
            },
            "height": 340,
        },
    }
    return [page.chart("batch-sizes", figure), page.table(columns, cells, kind="batch-sizes")]


def summary(doc: Mapping[str, Any]) -> Markup:
    """Workload, hardware and its ceilings, versions, and the step's headline figures."""
    wl, hw, totals, timing = doc["workload"], doc["hardware"], doc["totals"], doc.get("timing")
    environment = doc.get("environment") or {}
    calibration = hw.get("calibration")
    source = (
        f"calibrated on this machine at {calibration.get('measured_at')}"
        f" ({calibration.get('method')}, {calibration.get('threads')} threads)"
        if calibration
        else "datasheet"
    )
    used = precisions_used(doc)
    rows: list[tuple[str, Value | str | None]] = [
        ("workload", wl["name"]),
        ("batch size", Value(wl["batch_size"], Unit.INTEGER)),
        # "bf16 autocast" or "bf16 pure", as the terminal's workload line says it.
        ("dtype", StepDtype.of(Precision(wl["dtype"]), mixed=wl.get("mixed", False)).label),
        ("device", wl["device"]),
        ("parameters", Value(wl.get("parameter_count"), Unit.COUNT)),
        ("hardware", f"{hw['name']} ({hw['id']}), {source}"),
        ("ceilings used", ceilings_text(hw, used)),
        ("lightspeed", doc.get("lightspeed_version") or "unknown"),
        ("torch", environment.get("torch_version") or "not recorded"),
        ("date", doc.get("created_at") or "not recorded"),
    ]
    if timing:
        rate = timing.get("samples_per_s")
        rows.append(
            (
                "step time",
                f"{units.seconds(timing['median_s'])} median (IQR"
                f" {units.seconds(timing['iqr_s'])}, {timing['replicates']} replicates)"
                + ("" if rate is None else f", {rate:,.1f} samples/s"),
            )
        )
    rows += [
        ("speed of light", Value(totals["sol_time_s"], Unit.SECONDS)),
        ("of speed of light", Value(totals.get("efficiency"), Unit.FRACTION)),
        ("MFU", Value(totals.get("mfu"), Unit.FRACTION)),
        ("work", f"{units.count(totals['flops'], 'FLOP')}, {units.size(totals['bytes'])} moved"),
        ("bound", doc.get("bound")),
    ]
    if doc.get("failure"):
        rows.append(("stopped", doc["failure"]))
    return fields(rows)


def precisions_used(doc: Mapping[str, Any]) -> set[str]:
    """The precisions the profile's ops with FLOPs are placed at."""
    return {op["precision"] for op in doc["ops"] if op.get("flops") and op.get("precision")}


def ceilings_text(hw: Mapping[str, Any], used: set[str]) -> str:
    """The peaks of the precisions in `used` (all, when none is), then memory and cache
    bandwidth, and the other precisions' peaks after them."""
    peaks = hw.get("peak_flops_per_s") or {}
    chosen = [p for p in peaks if p in used] or list(peaks)
    text_of = ", ".join(f"{p} {units.flops_rate(peaks[p])}" for p in chosen)
    memory = f"memory {units.byte_rate(hw['memory_bandwidth_bytes_per_s'])}"
    cache = hw.get("cache_bandwidth_bytes_per_s")
    if cache:
        memory += f", cache {units.byte_rate(cache)} ({units.size(hw.get('cache_bytes'))})"
    others = [p for p in peaks if p not in chosen]
    rest = f" (other peaks: {', '.join(f'{p} {units.flops_rate(peaks[p])}' for p in others)})"
    return f"{text_of}; {memory}" + (rest if others else "")


def profile_roofline(doc: Mapping[str, Any]) -> roofline.Roofline:
    """The profile's ops with FLOPs, bytes and a time, on its hardware's roofs."""
    points = tuple(
        roofline.Point(
            group=op["phase"],
            name=op_label(op),
            module=op["module"] or "(root)",
            detail=shapes_text(op.get("input_shapes") or ()),
            flops=float(op["flops"]),
            bytes=float(op["bytes"]),
            time_s=float(op["time_s"]),
            sol_time_s=op.get("sol_time_s"),
        )
        for op in doc["ops"]
        if roofline.placeable(op["flops"], op["bytes"], op.get("time_s"))
    )
    used = precisions_used(doc)
    hw = doc["hardware"]
    return roofline.Roofline(
        title=f"{doc['workload']['name']} on {hw['name']}",
        points=points,
        roofs=roofline.roofs(hw, used, points),
        left_out=len(doc["ops"]) - len(points),
    )


def _module_filter(chart_id: str, doc: Mapping[str, Any]) -> Markup:
    """A list of the model's modules that keeps the roofline's points under one."""
    modules = sorted({op["module"] or "(root)" for op in doc["ops"]})
    # The option's value is the module as the chart's custom data holds it.
    options = "".join(f'<option value="{text(label(m))}">{text(m)}</option>' for m in modules)
    return (
        '<div class="controls"><label>module: <select class="ls-module-filter"'
        f' data-chart="{chart_id}"><option value="*">all</option>{options}</select></label></div>'
    )


def phases_figure(phases: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each phase's measured op time beside its speed of light."""
    names = [label(p) for p in phases]
    bars = (("measured", "time_s", "#2b59c3"), ("speed of light", "sol_time_s", "#3a9d5d"))
    return {
        "data": [
            {
                "type": "bar",
                "name": name,
                "x": names,
                "y": [agg.get(key) or 0.0 for agg in phases.values()],
                "marker": {"color": colour},
                "hovertemplate": "%{x}: %{y:.3s}s<extra>" + name + "</extra>",
            }
            for name, key, colour in bars
        ],
        "layout": {
            "title": {"text": "Time by phase: measured and at the speed of light"},
            "barmode": "group",
            "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
            "height": 380,
        },
    }


_ROOT = "/"  # the sunburst's id of the whole step


def _modules_figure(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A sunburst of the module tree. Each module's value is its own time (its subtree's
    less its children's), so with `branchvalues="remainder"` a ring's area is a whole
    subtree's time; its colour is the subtree's fraction of the speed of light."""
    modules: Mapping[str, Mapping[str, Any]] = {
        path: agg for path, agg in (doc.get("modules") or {}).items() if path != ""
    }
    root_agg = (doc.get("modules") or {}).get("") or {}

    def parent(path: str) -> str:
        # The nearest enclosing module the profile has figures for; the step's root
        # holds the top-level modules and what ran outside the model.
        while "." in path and not path.startswith("("):
            path = path.rsplit(".", 1)[0]
            if path in modules:
                return path
        return _ROOT

    paths = [_ROOT, *modules]
    parents = ["", *(parent(p) for p in modules)]
    subtree = {p: (modules[p].get("time_s") or 0.0) for p in modules}
    subtree[_ROOT] = root_agg.get("time_s") or sum(
        t for p, t in subtree.items() if parent(p) == _ROOT
    )
    own = dict(subtree)
    for path, up in zip(paths[1:], parents[1:], strict=True):
        own[up] -= subtree[path]
    aggs = {_ROOT: root_agg, **modules}
    root_name = f"{doc['workload']['name']} (all captured ops)"
    custom, colours = [], []
    for path in paths:
        agg = aggs[path]
        time_s, sol = subtree[path], agg.get("sol_time_s") or 0.0
        colours.append(min(sol / time_s, 1.0) if time_s else 0.0)
        custom.append(
            [
                label(root_name if path == _ROOT else path),
                units.seconds(time_s),
                units.seconds(sol),
                units.percent(sol / time_s) if time_s else "—",
                units.count(agg.get("flops") or 0, "FLOP"),
            ]
        )
    return {
        "data": [
            {
                "type": "sunburst",
                "ids": [label(p) for p in paths],
                "labels": [label(root_name if p == _ROOT else p.rsplit(".", 1)[-1]) for p in paths],
                "parents": [label(p) for p in parents],
                "values": [max(own[p], 0.0) for p in paths],
                "branchvalues": "remainder",
                "customdata": custom,
                "marker": {
                    "colors": colours,
                    "colorscale": "RdYlGn",
                    "cmin": 0.0,
                    "cmax": 1.0,
                    "showscale": True,
                    "colorbar": {"title": {"text": "of SoL"}, "tickformat": ".0%"},
                },
                "hovertemplate": "<b>%{customdata[0]}</b><br>time %{customdata[1]}, speed of"
                " light %{customdata[2]} (%{customdata[3]})<br>%{customdata[4]}<extra></extra>",
                "maxdepth": 3,
            }
        ],
        "layout": {
            "title": {"text": "Time by module (the inner rings hold the outer)"},
            "height": 520,
            "margin": {"t": 50, "l": 10, "r": 10, "b": 10},
        },
    }
