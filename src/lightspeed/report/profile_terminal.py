"""The terminal report of a profile: summary, phases, module tree, top ops, memory, findings."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from lightspeed import units
from lightspeed.analysis.step_roofline import Aggregate, OpAnalysis
from lightspeed.analysis.summary import ProfileAnalysis
from lightspeed.facts.hardware import MemoryLevel
from lightspeed.facts.records import MemoryBreakdown
from lightspeed.report.terminal import workload_line
from lightspeed.rules import Bound, FindingKind


def profile_report(analysis: ProfileAnalysis, *, top: int = 10, depth: int = 2) -> RenderableType:
    """Every section of the report, in reading order."""
    parts: list[RenderableType] = [summary(analysis), phases(analysis)]
    parts.append(module_tree(analysis, depth))
    parts.append(top_ops(analysis, top))
    if analysis.profile.memory is not None:
        parts.append(memory(analysis.profile.memory, analysis.profile.workload.parameter_count))
    parts.append(findings(analysis))
    return Group(*parts)


def summary(analysis: ProfileAnalysis) -> RenderableType:
    p = analysis.profile
    t = analysis.totals
    wl = p.workload
    grid = Table.grid(padding=(0, 2))
    grid.add_row("workload", workload_line(wl))
    grid.add_row("hardware", f"{p.hardware.name} ({p.hardware.id})")
    if p.timing is not None:
        grid.add_row(
            "step time",
            f"{units.seconds(p.timing.median_s)} median (IQR {units.seconds(p.timing.iqr_s)},"
            f" n={p.timing.n}), {p.timing.per_second(wl.batch_size):,.1f} samples/s",
        )
    grid.add_row(
        "work",
        f"{units.count(t.flops, 'FLOP')} ({units.count(t.model_flops, 'FLOP')} forward +"
        f" backward), {units.size(t.bytes)} moved",
    )
    grid.add_row("speed of light", units.seconds(t.sol_time_s))
    if t.efficiency is not None:
        grid.add_row(
            "of speed of light",
            Text(f"{units.percent(t.efficiency)}", style="bold")
            + Text(f"  (achieved {units.flops_rate(t.achieved_flops_per_s or 0)})"),
        )
        grid.add_row(
            "MFU / HFU",
            f"{units.percent(t.mfu or 0)} / {units.percent(t.hfu or 0)} of"
            f" {units.flops_rate(t.peak_flops_per_s)}",
        )
    grid.add_row("bound", Text(analysis.bound.value, style="bold"))
    if p.profiled_step_s:
        grid.add_row(
            "unattributed",
            f"{units.seconds(p.unattributed_s or 0)} of the {units.seconds(p.profiled_step_s)}"
            " profiled step ran outside captured ops",
        )
    if p.failure:
        grid.add_row("stopped", Text(p.failure, style="red"))
    return Panel(grid, title="Speed of light", title_align="left")


def _aggregate_row(name: str, agg: Aggregate) -> list[str]:
    eff = agg.efficiency
    return [
        name,
        units.count(agg.flops, "FLOP"),
        units.size(agg.bytes),
        units.seconds(agg.time_s) if agg.time_s else "—",
        units.seconds(agg.sol_time_s),
        units.percent(eff) if eff is not None else "—",
    ]


def _aggregate_table(title: str, first: str) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column(first)
    for column in ("FLOPs", "bytes", "time", "SoL", "of SoL"):
        table.add_column(column, justify="right")
    return table


def phases(analysis: ProfileAnalysis) -> RenderableType:
    table = _aggregate_table("Phases (op times from the profiled run)", "phase")
    for phase, agg in analysis.phases.items():
        table.add_row(*_aggregate_row(phase.value, agg))
    return table


def module_tree(analysis: ProfileAnalysis, depth: int) -> RenderableType:
    """Modules as a tree, `depth` levels below the root, each with its subtree's totals."""
    modules = analysis.modules
    root_name = f"{analysis.profile.workload.name} (model)"

    def label(name: str, agg: Aggregate) -> str:
        time = units.seconds(agg.time_s) if agg.time_s else "—"
        return (
            f"{name}  {units.count(agg.flops, 'FLOP')}, {time}, SoL {units.seconds(agg.sol_time_s)}"
        )

    tree = Tree(label(root_name, modules.get("", Aggregate())))
    nodes = {"": tree}
    for path in sorted(p for p in modules if p):
        level = path.count(".") + 1
        if level > depth or path.startswith("("):
            continue
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if parent in nodes:
            nodes[path] = nodes[parent].add(label(path, modules[path]))
    outside = [p for p in modules if p.startswith("(")]
    for path in outside:
        tree.add(label(path, modules[path]))
    return Panel(tree, title=f"Modules (depth {depth})", title_align="left")


def top_ops(analysis: ProfileAnalysis, n: int) -> RenderableType:
    table = Table(
        title=f"Top {n} ops by headroom: where to look first",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    # Names are the columns that give way: rich narrows only wrappable columns, and an
    # ellipsis keeps each op on one row; the figures keep their full width.
    for column in ("op", "module"):
        table.add_column(column, overflow="ellipsis")
    table.add_column("phase", no_wrap=True, min_width=9)
    for column, width in (("time", 7), ("SoL", 7), ("of SoL", 6)):
        table.add_column(column, justify="right", no_wrap=True, min_width=width)
    table.add_column("bound", no_wrap=True, min_width=7)
    for a in analysis.top(n):
        table.add_row(
            a.op.name.removeprefix("aten::"),
            a.op.module or "(root)",
            a.op.phase.value,
            units.seconds(a.time_s or 0),
            units.seconds(a.sol_time_s),
            units.percent(a.efficiency) if a.efficiency is not None else "—",
            _bound_label(a),
        )
    return table


def _bound_label(a: OpAnalysis) -> str:
    """The op's bound; a memory bound whose roof is the cache says `cache`."""
    if a.bound is None:
        return "—"
    if a.bound is Bound.MEMORY and a.memory_level is MemoryLevel.CACHE:
        return "cache"
    return a.bound.value


def memory(m: MemoryBreakdown, parameter_count: int | None) -> RenderableType:
    table = Table(title=f"Memory ({m.method})", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("category")
    table.add_column("size", justify="right")
    table.add_column("live at peak", justify="right")
    for name, size in m.categories().items():
        table.add_row(
            name.replace("_", " "), units.size(size), units.size(m.at_peak_bytes.get(name, 0))
        )
    table.add_row("peak", "", units.size(m.peak_bytes), style="bold")
    if parameter_count:
        state = m.parameters_bytes + m.gradients_bytes + m.optimizer_state_bytes
        table.caption = f"training state: {state / parameter_count:.1f} bytes per parameter"
    return table


def findings(analysis: ProfileAnalysis) -> RenderableType:
    if not analysis.findings:
        return Text("No findings.")
    lines = [Text("Findings", style="bold")]
    for f in analysis.findings:
        if f.kind is FindingKind.SPEED_OF_LIGHT:  # its message already says how much faster
            lines.append(Text(units.finding_line(f.kind.value, f.message)))
        else:
            lines.append(
                Text(units.finding_line(f.kind.value, f.message, f.evidence.get("max_speedup")))
            )
    return Group(*lines)
