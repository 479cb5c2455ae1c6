"""The roofline chart of a result as a static PNG image, for papers and CI logs, drawn
with matplotlib (no browser) from the same `Roofline` the HTML report draws."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightspeed.errors import ConfigError
from lightspeed.report.html import check_result, roofline


def roofline_of(doc: Mapping[str, Any]) -> roofline.Roofline:
    """The roofline a result's report draws first: a profile's ops, a bench's workloads,
    a trace's matrix products (of the first rank that recorded their shapes)."""
    check_result(doc, "the result")
    kind = doc["document"]
    if kind == "profile":
        from lightspeed.report.html.profile_page import profile_roofline

        return profile_roofline(doc)
    if kind == "bench":
        from lightspeed.report.html.bench_page import bench_roofline

        return bench_roofline(doc)
    from lightspeed.report.html.trace_page import matmul_roofline

    for rank in doc["ranks"]:
        if rank.get("matmuls") and rank["matmuls"].get("points"):
            return matmul_roofline(rank["matmuls"])
    raise ConfigError(
        "the trace has no matrix products with recorded shapes to place on a roofline;"
        " record it with torch.profiler's record_shapes=True."
    )


def _plain(name: str) -> str:
    """`name` as matplotlib shows it literally: `$` would start its math text, and a
    label beginning with `_` would be left out of the legend."""
    shown = name.replace("$", r"\$")
    return f" {shown}" if shown.startswith("_") else shown


def write_roofline_png(path: str | Path, doc: Mapping[str, Any]) -> Path:
    """Draw the result's roofline to `path` as a PNG (atomically)."""
    r = roofline_of(doc)
    if not r.points:
        raise ConfigError(
            "nothing in the result has FLOPs, bytes and a time to place on the roofline."
        )
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(
            "--png needs matplotlib: pip install 'lightspeed[png]' (or pip install matplotlib)."
        ) from None
    fig = Figure(figsize=(9, 6), dpi=150)
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.set_yscale("log")
    for name, sized in roofline.groups(r).items():
        ax.scatter(
            [p.intensity for p, _ in sized],
            [p.flops_per_s for p, _ in sized],
            s=[size**2 / 2 for _, size in sized],  # matplotlib sizes by area, in points²
            alpha=0.6,
            color=roofline.GROUP_COLOURS.get(name),
            edgecolors="#1d2330",
            linewidths=0.4,
            label=_plain(name),
        )
    for roof in r.roofs:
        if roof.shown:
            ax.plot(
                roof.xs,
                roof.ys,
                color="#1d2330",
                linewidth=1.2,
                linestyle=":" if roof.dashed else "-",
            )
            ax.annotate(
                _plain(roof.name),
                (roof.xs[-1], roof.ys[-1]),
                fontsize=7,
                ha="right",
                va="bottom",
                color="#1d2330",
            )
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(_plain(r.title))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp.png")
    fig.savefig(tmp, format="png", bbox_inches="tight")
    tmp.replace(target)
    return target
