"""A roofline chart's content, read from a result: each op as a point (arithmetic
intensity in FLOP/byte, achieved FLOP/s) and the hardware's roofs (a compute roof per
precision, the memory and cache bandwidth slopes). `figure` draws it with plotly,
`report.png` with matplotlib, from the same `Roofline`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from lightspeed import units
from lightspeed.report.html.markup import label

# A point's marker: its area grows with its time, from the smallest to the largest.
_SMALLEST_MARKER, _LARGEST_MARKER = 5.0, 34.0
# Phases (and precisions) in one order and colour wherever they appear.
GROUP_COLOURS = {
    "forward": "#2b59c3",
    "backward": "#d1603d",
    "optimizer": "#3a9d5d",
    "data": "#8e44ad",
    "fp32": "#2b59c3",
    "tf32": "#17becf",
    "bf16": "#d1603d",
    "fp16": "#e6a23c",
    "fp64": "#7f7f7f",
    "fp8": "#8e44ad",
}


@dataclasses.dataclass(frozen=True)
class Point:
    """One op on the roofline: `group` colours it (a phase, a precision)."""

    group: str
    name: str
    module: str
    detail: str  # shapes
    flops: float
    bytes: float
    time_s: float
    sol_time_s: float | None

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def flops_per_s(self) -> float:
        """Achieved FLOP/s: its FLOPs over its measured time."""
        return self.flops / self.time_s


@dataclasses.dataclass(frozen=True)
class Roof:
    """A roof as a polyline in (intensity, FLOP/s); `shown` roofs are drawn at first,
    the others are in the legend only."""

    name: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    dashed: bool = False
    shown: bool = True


@dataclasses.dataclass(frozen=True)
class Roofline:
    """Points, roofs, and how many ops had no place on a log-log chart (no FLOPs, no
    bytes or no time)."""

    title: str
    points: tuple[Point, ...]
    roofs: tuple[Roof, ...]
    left_out: int = 0


def placeable(flops: float | None, bytes_: float | None, time_s: float | None) -> bool:
    """Whether an op has a place on a log-log roofline."""
    return bool(flops and bytes_ and time_s and flops > 0 and bytes_ > 0 and time_s > 0)


def roofs(
    hardware: Mapping[str, Any], used: Iterable[str], points: tuple[Point, ...]
) -> tuple[Roof, ...]:
    """The roofs of `hardware` (its JSON object) over the intensities `points` span: a
    compute roof per precision and one per matrix peak (drawn for the precisions in
    `used`, in the legend for the others), then the memory and cache bandwidth slopes up
    to the highest peak."""
    peaks = {p: float(v) for p, v in (hardware.get("peak_flops_per_s") or {}).items() if v}
    matrix = {p: float(v) for p, v in (hardware.get("matrix_peak_flops_per_s") or {}).items() if v}
    memory = hardware.get("memory_bandwidth_bytes_per_s")
    cache = hardware.get("cache_bandwidth_bytes_per_s")
    if not peaks or not memory:
        return ()
    ridges = [peak / memory for peak in (*peaks.values(), *matrix.values())]
    intensities = [p.intensity for p in points] or ridges
    lo = min(*intensities, *ridges) / 4
    hi = max(*intensities, *ridges) * 4
    used = set(used) or {"fp32"}
    found: list[Roof] = []
    named = [(f"{p} peak", p, v) for p, v in peaks.items()]
    named += [(f"{p} matrix peak", p, v) for p, v in matrix.items()]
    for name, precision, peak in sorted(named, key=lambda roof: roof[2]):
        # lo lies below every ridge point, so each roof bends once.
        ridge = peak / memory
        found.append(
            Roof(
                f"{name} {units.flops_rate(peak)}",
                (lo, ridge, hi),
                (memory * lo, peak, peak),
                shown=precision in used,
            )
        )
    # The slopes rise to the highest roof drawn, not past it.
    top = max((peak for _, p, peak in named if p in used), default=max(peaks.values()))
    found.append(
        Roof(f"memory {units.byte_rate(memory)}", (lo, top / memory), (memory * lo, top), True)
    )
    if cache:
        found.append(
            Roof(f"cache {units.byte_rate(cache)}", (lo, top / cache), (cache * lo, top), True)
        )
    return tuple(found)


def marker_sizes(points: tuple[Point, ...]) -> list[float]:
    """Each point's marker diameter in pixels: its area grows with its time."""
    longest = max((p.time_s for p in points), default=0.0) or 1.0
    span = _LARGEST_MARKER - _SMALLEST_MARKER
    return [_SMALLEST_MARKER + span * math.sqrt(p.time_s / longest) for p in points]


def groups(r: Roofline) -> dict[str, list[tuple[Point, float]]]:
    """The points of each group, in the order groups first appear, with their sizes."""
    found: dict[str, list[tuple[Point, float]]] = {}
    for p, size in zip(r.points, marker_sizes(r.points), strict=True):
        found.setdefault(p.group, []).append((p, size))
    return found


_HOVER = (
    "<b>%{customdata[0]}</b><br>module: %{customdata[1]}<br>shapes: %{customdata[2]}"
    "<br>time %{customdata[3]}, speed of light %{customdata[4]} (%{customdata[5]})"
    "<br>%{x:.3g} FLOP/B, %{y:.3s}FLOP/s<extra>%{fullData.name}</extra>"
)


def figure(r: Roofline, *, group_title: str) -> dict[str, Any]:
    """The plotly figure of `r`: one trace per group (the legend filters them), every
    point sized by its time, and the roofs as lines."""
    data: list[dict[str, Any]] = []
    for name, sized in groups(r).items():
        members = [p for p, _ in sized]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": label(name),
                "legendgroup": "points",
                "legendgrouptitle": {"text": group_title},
                "x": [p.intensity for p in members],
                "y": [p.flops_per_s for p in members],
                "customdata": [_custom(p) for p in members],
                "hovertemplate": _HOVER,
                "marker": {
                    "size": [size for _, size in sized],
                    "color": GROUP_COLOURS.get(name),
                    "opacity": 0.7,
                    "line": {"width": 0.5, "color": "#1d2330"},
                },
            }
        )
    for roof in r.roofs:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": label(roof.name),
                "legendgroup": "roofs",
                "legendgrouptitle": {"text": "roofs"},
                "x": list(roof.xs),
                "y": list(roof.ys),
                "hoverinfo": "name",
                "visible": True if roof.shown else "legendonly",
                "line": {
                    "color": "#1d2330",
                    "width": 1.5,
                    "dash": "dot" if roof.dashed else "solid",
                },
            }
        )
    layout = {
        "title": {"text": label(r.title)},
        "xaxis": {"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
        "yaxis": {"type": "log", "title": {"text": "achieved FLOP/s"}, "exponentformat": "SI"},
        "hovermode": "closest",
        "legend": {"groupclick": "toggleitem"},
        "margin": {"t": 50, "r": 20},
        "height": 560,
    }
    return {"data": data, "layout": layout}


def _custom(p: Point) -> list[str]:
    sol = p.sol_time_s
    fraction = "—" if not sol else units.percent(sol / p.time_s)
    return [
        label(p.name),
        label(p.module),
        label(p.detail),
        units.seconds(p.time_s),
        units.seconds(sol) if sol is not None else "—",
        f"{fraction} of it",
    ]
