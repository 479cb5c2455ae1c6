"""A step's memory as charts: bytes by category (its size, and what was live at the
peak), and the bytes live by category over the step, stacked, the phases shaded and the
peak marked — from a profile's (or a bench result's) `memory` JSON object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed import units
from lightspeed.report.html.markup import Markup, Page, label
from lightspeed.report.html.roofline import GROUP_COLOURS

# The memory categories' colours, in MemoryBreakdown's order.
MEMORY_COLOURS = {
    "parameters": "#2b59c3",
    "gradients": "#d1603d",
    "optimizer_state": "#3a9d5d",
    "activations": "#e6a23c",
    "temporaries": "#8e44ad",
    "inputs": "#7f7f7f",
}
# What the CUDA allocator held at its peak beyond the storages ops returned.
ALLOCATOR_EXTRA = "allocator's own"


def memory_charts(page: Page, memory: Mapping[str, Any]) -> list[Markup]:
    """The charts of `memory`: by category, then over the step when it was recorded."""
    at_peak = memory.get("at_peak_bytes") or {}
    names = list(MEMORY_COLOURS)
    shown = [label(n.replace("_", " ")) for n in names]
    categories = page.chart(
        "memory-categories",
        {
            "data": [
                {
                    "type": "bar",
                    "name": "size",
                    "x": shown,
                    "y": [memory.get(f"{n}_bytes") or 0 for n in names],
                    "marker": {"color": "#2b59c3"},
                    "hovertemplate": "%{x}: %{y:.4s}B<extra>size</extra>",
                },
                {
                    "type": "bar",
                    "name": "live at the peak",
                    "x": shown,
                    "y": [at_peak.get(n, 0) for n in names],
                    "marker": {"color": "#d1603d"},
                    "hovertemplate": "%{x}: %{y:.4s}B<extra>live at the peak</extra>",
                },
            ],
            "layout": {
                "title": {
                    "text": f"By category ({label(memory.get('method'))}); peak"
                    f" {units.size(memory.get('peak_bytes'))}"
                },
                "barmode": "group",
                "yaxis": {"title": {"text": "bytes"}, "exponentformat": "SI"},
                "height": 380,
            },
        },
    )
    over = memory.get("over_step")
    if not over or not over.get("op_index"):
        return [categories, '<p class="empty">The memory over the step was not recorded.</p>']
    return [
        categories,
        page.chart(
            "memory-over-step",
            memory_over_step_figure(over, memory["peak_bytes"]),
            caption="Bytes live by category after each allocation and free of the step, as"
            " the allocation replay saw them (x: ops dispatched so far, views and the ops"
            " the op table leaves out included); phases shaded; the peak marked.",
        ),
    ]


def memory_over_step_figure(over: Mapping[str, Any], peak_bytes: int) -> dict[str, Any]:
    """Stacked areas of live bytes by category against the ops dispatched. Where the
    device's allocator peaked above what the replay saw (workspaces, rounding: CUDA),
    the difference is stacked at the replay's peak, so the highest point is the
    profile's peak either way."""
    xs = list(over["op_index"])
    series = {name: list(sizes) for name, sizes in over["bytes"].items()}
    totals = [sum(column) for column in zip(*series.values(), strict=True)]
    at = totals.index(max(totals))
    if peak_bytes > totals[at]:
        series[ALLOCATOR_EXTRA] = [0] * len(xs)
        series[ALLOCATOR_EXTRA][at] = peak_bytes - totals[at]
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "stackgroup": "live",
            "name": label(name.replace("_", " ")),
            "x": xs,
            "y": sizes,
            "line": {"width": 0.5, "color": MEMORY_COLOURS.get(name, "#b3261e")},
            "hovertemplate": "%{y:.4s}B after %{x} ops<extra>"
            + label(name.replace("_", " "))
            + "</extra>",
        }
        for name, sizes in series.items()
    ]
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
                "fillcolor": GROUP_COLOURS.get(phase, "#999"),
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
                "text": label(phase),
                "showarrow": False,
                "font": {"size": 10},
            }
        )
    annotations.append(
        {
            "x": xs[at],
            "y": max(peak_bytes, totals[at]),
            "text": f"peak {units.size(max(peak_bytes, totals[at]))}",
            "showarrow": True,
            "arrowhead": 2,
            "ax": 40,
            "ay": -30,
        }
    )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Live bytes over the step"},
            "xaxis": {"title": {"text": "ops dispatched"}},
            "yaxis": {"title": {"text": "bytes live"}, "exponentformat": "SI"},
            "shapes": shapes,
            "annotations": annotations,
            "hovermode": "x unified",
            "height": 420,
        },
    }
