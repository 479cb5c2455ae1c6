"""The HTML report of a profile, drawn from its JSON document alone: header, the
roofline, time by phase and by module against their speed of light, memory by category
and over the step, every op in a sortable table, and the findings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed import units
from lightspeed.document import Unit, Value
from lightspeed.report.html import roofline
from lightspeed.report.html.markup import Column, Markup, Page, fields, findings, label, text

# The memory categories' colours, in MemoryBreakdown's order.
MEMORY_COLOURS = {
    "parameters": "#2b59c3",
    "gradients": "#d1603d",
    "optimizer_state": "#3a9d5d",
    "activations": "#e6a23c",
    "temporaries": "#8e44ad",
    "inputs": "#7f7f7f",
}


def profile_page(doc: Mapping[str, Any], page: Page | None = None, prefix: str = "") -> Page:
    """The sections of a profile's report added to `page` (a new one by default);
    `prefix` makes the anchors unique when several profiles share a page."""
    wl = doc["workload"]
    page = page or Page(f"{wl['name']}: speed-of-light profile")
    page.section("Summary", summary(doc), anchor=f"{prefix}summary")
    rl = profile_roofline(doc)
    page.section(
        "Roofline",
        _module_filter(page, doc),
        page.chart(
            "roofline",
            roofline.figure(rl, group_title="phase"),
            caption=f"Each op with FLOPs, bytes and a time, sized by its time; {rl.left_out}"
            " ops without all three are in the op table only. Click a phase in the legend"
            " to hide or show it; choose a module above to keep its ops.",
        ),
        anchor=f"{prefix}roofline",
    )
    page.section(
        "Time against the speed of light",
        page.chart("phases", _phases_figure(doc)),
        page.chart(
            "modules",
            _modules_figure(doc),
            caption="Click a module to drill into it, the centre to go back up; hover for"
            " its time, speed of light and fraction.",
        ),
        anchor=f"{prefix}time",
    )
    if doc.get("memory"):
        page.section("Memory", *_memory(page, doc["memory"]), anchor=f"{prefix}memory")
    page.section("Ops", _op_table(page, doc), anchor=f"{prefix}ops")
    page.section("Findings", findings(doc.get("findings") or []), anchor=f"{prefix}findings")
    return page


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
    rows: list[tuple[str, Value | str | None]] = [
        ("workload", wl["name"]),
        ("batch size", Value(wl["batch_size"], Unit.INTEGER)),
        ("dtype", wl["dtype"]),
        ("device", wl["device"]),
        ("parameters", Value(wl.get("parameter_count"), Unit.COUNT)),
        ("hardware", f"{hw['name']} ({hw['id']}), {source}"),
        ("ceilings used", ceilings_text(hw)),
        ("lightspeed", doc.get("lightspeed_version") or "unknown"),
        ("torch", environment.get("torch_version") or "not recorded"),
        ("date", doc.get("created_at") or "not recorded"),
    ]
    if timing:
        rows.append(
            (
                "step time",
                f"{units.seconds(timing['median_s'])} median (IQR"
                f" {units.seconds(timing['iqr_s'])}, {timing['replicates']} replicates),"
                f" {timing['samples_per_s']:,.1f} samples/s",
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


def ceilings_text(hw: Mapping[str, Any]) -> str:
    """Each precision's peak, then memory and cache bandwidth."""
    peaks = ", ".join(
        f"{p} {units.flops_rate(v)}" for p, v in (hw.get("peak_flops_per_s") or {}).items()
    )
    memory = f"memory {units.byte_rate(hw['memory_bandwidth_bytes_per_s'])}"
    cache = hw.get("cache_bandwidth_bytes_per_s")
    cached = (
        f", cache {units.byte_rate(cache)} ({units.size(hw.get('cache_bytes'))})" if cache else ""
    )
    return f"{peaks}; {memory}{cached}"


def _shapes(op: Mapping[str, Any]) -> str:
    shapes = op.get("input_shapes") or []
    if not shapes:
        return "shapes unknown"
    return ", ".join("×".join(map(str, s)) or "scalar" for s in shapes)


def profile_roofline(doc: Mapping[str, Any]) -> roofline.Roofline:
    """The profile's ops with FLOPs, bytes and a time, on its hardware's roofs."""
    points = []
    left_out = 0
    for op in doc["ops"]:
        if not roofline.placeable(op["flops"], op["bytes"], op.get("time_s")):
            left_out += 1
            continue
        points.append(
            roofline.Point(
                group=op["phase"],
                name=f"{op['name'].removeprefix('aten::')} #{op['index']}",
                module=op["module"] or "(root)",
                detail=_shapes(op),
                flops=float(op["flops"]),
                bytes=float(op["bytes"]),
                time_s=float(op["time_s"]),
                sol_time_s=op.get("sol_time_s"),
            )
        )
    placed = tuple(points)
    used = {op["precision"] for op in doc["ops"] if op.get("flops")}
    hw = doc["hardware"]
    return roofline.Roofline(
        title=f"{doc['workload']['name']} on {hw['name']}",
        points=placed,
        roofs=roofline.roofs(hw, used, placed),
        left_out=left_out,
    )


def _module_filter(page: Page, doc: Mapping[str, Any]) -> Markup:
    """A list of the model's modules that keeps the roofline's points under one."""
    chart_id = f"ls-chart-{len(page.figures) + 1}"  # the roofline is the next chart
    modules = sorted({op["module"] or "(root)" for op in doc["ops"]})
    options = "".join(f'<option value="{text(label(m))}">{text(m)}</option>' for m in modules)
    return (
        '<div class="controls"><label>module: <select class="ls-module-filter"'
        f' data-chart="{chart_id}"><option value="*">all</option>{options}</select></label></div>'
    )


def _phases_figure(doc: Mapping[str, Any]) -> dict[str, Any]:
    phases = doc.get("phases") or {}
    names = list(phases)
    return {
        "data": [
            {
                "type": "bar",
                "name": "measured",
                "x": names,
                "y": [phases[p]["time_s"] for p in names],
                "marker": {"color": "#2b59c3"},
                "hovertemplate": "%{x}: %{y:.3s}s measured<extra></extra>",
            },
            {
                "type": "bar",
                "name": "speed of light",
                "x": names,
                "y": [phases[p]["sol_time_s"] for p in names],
                "marker": {"color": "#3a9d5d"},
                "hovertemplate": "%{x}: %{y:.3s}s at the speed of light<extra></extra>",
            },
        ],
        "layout": {
            "title": {"text": "Time by phase: measured and at the speed of light"},
            "barmode": "group",
            "yaxis": {"title": {"text": "seconds"}, "exponentformat": "SI"},
            "height": 380,
        },
    }


def _modules_figure(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A sunburst of the module tree: each module's own time (its subtree's less its
    children's), so a parent's area is its whole subtree's time."""
    modules: Mapping[str, Mapping[str, Any]] = doc.get("modules") or {}
    root_name = f"{doc['workload']['name']} (whole step)"

    def parent(path: str) -> str:
        # The nearest enclosing module the profile has figures for; the step's root
        # holds the top-level modules and what ran outside the model.
        while "." in path and not path.startswith("("):
            path = path.rsplit(".", 1)[0]
            if path in modules:
                return path
        return "/"

    ids = ["/" if p == "" else p for p in modules]
    parents = ["" if p == "" else parent(p) for p in modules]
    own = {}
    for path, agg in modules.items():
        key = "/" if path == "" else path
        own[key] = agg.get("time_s") or 0.0
    for key, up in zip(ids, parents, strict=True):
        if up:
            own[up] -= own_total(modules, key)
    custom = []
    for path, agg in modules.items():
        time_s, sol = agg.get("time_s") or 0.0, agg.get("sol_time_s") or 0.0
        custom.append(
            [
                label(root_name if path == "" else path),
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
                "ids": [label(i) for i in ids],
                "labels": [label(root_name if i == "/" else i.rsplit(".", 1)[-1]) for i in ids],
                "parents": [label(p) for p in parents],
                "values": [max(own[i], 0.0) for i in ids],
                "branchvalues": "remainder",
                "customdata": custom,
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


def own_total(modules: Mapping[str, Mapping[str, Any]], key: str) -> float:
    """A module's subtree time, by its chart id ("/" is the whole step)."""
    return modules["" if key == "/" else key].get("time_s") or 0.0


def _memory(page: Page, memory: Mapping[str, Any]) -> list[Markup]:
    at_peak = memory.get("at_peak_bytes") or {}
    names = list(MEMORY_COLOURS)
    categories = page.chart(
        "memory-categories",
        {
            "data": [
                {
                    "type": "bar",
                    "name": "size",
                    "x": [n.replace("_", " ") for n in names],
                    "y": [memory[f"{n}_bytes"] for n in names],
                    "marker": {"color": "#2b59c3"},
                    "hovertemplate": "%{x}: %{y:.4s}B<extra>size</extra>",
                },
                {
                    "type": "bar",
                    "name": "live at the peak",
                    "x": [n.replace("_", " ") for n in names],
                    "y": [at_peak.get(n, 0) for n in names],
                    "marker": {"color": "#d1603d"},
                    "hovertemplate": "%{x}: %{y:.4s}B<extra>live at the peak</extra>",
                },
            ],
            "layout": {
                "title": {
                    "text": f"By category ({label(memory['method'])}); peak"
                    f" {units.size(memory['peak_bytes'])}"
                },
                "barmode": "group",
                "yaxis": {"title": {"text": "bytes"}, "exponentformat": "SI"},
                "height": 380,
            },
        },
    )
    parts = [categories]
    over = memory.get("over_step")
    if over:
        parts.append(
            page.chart(
                "memory-over-step",
                memory_over_step_figure(over, memory["peak_bytes"], memory["method"]),
                caption="Bytes live by category after each allocation and free of the step"
                " (the allocation replay); phases shaded; the peak marked.",
            )
        )
    else:
        parts.append('<p class="empty">The memory over the step was not recorded.</p>')
    return parts


def memory_over_step_figure(
    over: Mapping[str, Any], peak_bytes: int, method: str
) -> dict[str, Any]:
    """Stacked areas of live bytes by category against the ops run, the phases shaded
    and the peak marked."""
    xs = over["op_index"]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "live",
            "name": name.replace("_", " "),
            "x": xs,
            "y": sizes,
            "line": {"width": 0.5, "color": MEMORY_COLOURS.get(name)},
            "hovertemplate": "%{y:.4s}B after %{x} ops<extra>"
            + name.replace("_", " ")
            + "</extra>",
        }
        for name, sizes in over["bytes"].items()
    ]
    totals = [sum(column) for column in zip(*over["bytes"].values(), strict=True)]
    shapes, annotations = [], []
    for phase, first, end in over.get("phases") or []:
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": first,
                "x1": end,
                "y0": 0,
                "y1": 1,
                "fillcolor": roofline.GROUP_COLOURS.get(phase, "#999"),
                "opacity": 0.07,
                "line": {"width": 0},
                "layer": "below",
            }
        )
        annotations.append(
            {
                "x": (first + end) / 2,
                "y": 1.02,
                "xref": "x",
                "yref": "paper",
                "text": phase,
                "showarrow": False,
                "font": {"size": 10},
            }
        )
    if totals:
        at = totals.index(max(totals))
        annotations.append(
            {
                "x": xs[at],
                "y": totals[at],
                "text": f"peak {units.size(max(totals))}",
                "showarrow": True,
                "arrowhead": 2,
                "ax": 40,
                "ay": -30,
            }
        )
    if method == "cuda-allocator" and totals and peak_bytes != max(totals):
        # The allocator's peak includes what no op returned (workspaces, rounding).
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": peak_bytes,
                "y1": peak_bytes,
                "line": {"dash": "dash", "color": "#b3261e"},
            }
        )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Live bytes over the step"},
            "xaxis": {"title": {"text": "ops run"}},
            "yaxis": {"title": {"text": "bytes live"}, "exponentformat": "SI"},
            "shapes": shapes,
            "annotations": annotations,
            "hovermode": "x unified",
            "height": 420,
        },
    }


_OP_COLUMNS = (
    Column("op", "op"),
    Column("module", "module"),
    Column("phase", "phase"),
    Column("shapes", "input shapes"),
    Column("precision", "precision"),
    Column("flops", "FLOPs", numeric=True),
    Column("bytes", "bytes", numeric=True),
    Column("intensity", "FLOP/B", numeric=True),
    Column("time_s", "time", numeric=True),
    Column("sol_time_s", "SoL", numeric=True),
    Column("efficiency", "of SoL", numeric=True),
    Column("headroom_s", "headroom", numeric=True),
    Column("bound", "bound"),
)


def _bound(op: Mapping[str, Any]) -> str:
    if op.get("bound") is None:
        return "—"
    if op["bound"] == "memory" and op.get("memory_level") == "cache":
        return "cache"
    return str(op["bound"])


def _op_table(page: Page, doc: Mapping[str, Any]) -> Markup:
    """Every op, the most headroom (time above its speed of light) first."""

    def headroom(op: Mapping[str, Any]) -> float:
        return (op.get("time_s") or 0.0) - (op.get("sol_time_s") or 0.0)

    ops = sorted(doc["ops"], key=lambda op: (-headroom(op), op["index"]))
    rows = [
        (
            f"{op['name'].removeprefix('aten::')} #{op['index']}",
            op["module"] or "(root)",
            op["phase"],
            _shapes(op),
            op.get("precision") or "—",
            Value(op["flops"], Unit.FLOPS),
            Value(op["bytes"], Unit.BYTES),
            Value(op["flops"] / op["bytes"] if op["bytes"] else None, Unit.NUMBER, ".3g"),
            Value(op.get("time_s"), Unit.SECONDS),
            Value(op.get("sol_time_s"), Unit.SECONDS),
            Value(op.get("efficiency"), Unit.FRACTION),
            Value(headroom(op), Unit.SECONDS),
            _bound(op),
        )
        for op in ops
    ]
    return page.table(
        _OP_COLUMNS,
        rows,
        caption=f"{len(ops)} ops, the most headroom (time above the speed of light) first;"
        " click a heading to sort, type to filter (words must all appear).",
        filterable=True,
        kind="ops",
    )
