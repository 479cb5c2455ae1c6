"""The terminal report of a trace analysis: per rank, the steps and their bounds, where
the device's time goes, the top kernels, the host side, and findings."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lightspeed import units
from lightspeed.rules import Finding
from lightspeed.trace.analysis import RankAnalysis, TraceAnalysis, WindowAnalysis
from lightspeed.trace.matmuls import MatmulStats


def trace_report(analysis: TraceAnalysis, *, step: int | None = None) -> RenderableType:
    """Every rank's report; `step` details one ProfilerStep instead of the whole trace."""
    parts: list[RenderableType] = [rank_report(r, step) for r in analysis.ranks]
    if len(analysis.ranks) > 1:
        parts.append(across_ranks(analysis))
    return Group(*parts)


def across_ranks(analysis: TraceAnalysis) -> RenderableType:
    """Steps compared across ranks, collectives matched across them, and findings."""
    parts: list[RenderableType] = []
    if analysis.skew:
        table = _table("Steps (rank); last: rank ×times it arrived last at a collective")
        table.add_column("step", justify="right", no_wrap=True, min_width=4)
        for column in ("slowest", "fastest", "max wait", "last"):
            table.add_column(column, no_wrap=True)
        for s in analysis.skew:
            slow, fast, waiter = s.slowest, s.fastest, s.longest_waiter
            wait = s.collective_wait_s
            table.add_row(
                str(s.step),
                f"{units.seconds(s.step_s[slow])} ({slow})",
                f"{units.seconds(s.step_s[fast])} ({fast})",
                "—" if waiter is None else f"{units.seconds(wait[waiter])} ({waiter})",
                ", ".join(f"{r} ×{n}" for r, n in s.often_last()) or "—",
            )
        parts.append(table)
    if analysis.collectives:
        table = _table("Collectives matched across ranks")
        table.add_column("kernel", overflow="ellipsis")
        for column in ("matched", "mean wait", "max wait", "total wait"):
            table.add_column(column, justify="right", no_wrap=True)
        for c in analysis.collectives:
            table.add_row(
                short_kernel_name(c.name),
                str(c.matched) + (f" (+{c.unmatched} unmatched)" if c.unmatched else ""),
                units.seconds(c.mean_spread_s),
                units.seconds(c.max_spread_s),
                units.seconds(c.spread_s),
            )
        parts.append(table)
    parts.append(_findings("Findings", _lines(analysis.findings)))
    if analysis.notes:
        parts.append(_findings("Not analysed", [f"• {note}" for note in analysis.notes]))
    return Panel(Group(*parts), title="Across ranks", title_align="left")


def rank_report(r: RankAnalysis, step: int | None) -> RenderableType:
    chosen = r.whole if step is None else next((w for w in r.steps if w.step == step), None)
    title = f"Rank {r.rank}: {r.path}"
    if chosen is None:
        known = ", ".join(str(w.step) for w in r.steps) or "none"
        return Panel(Text(f"no step {step} in this trace (steps: {known})"), title=title)
    parts: list[RenderableType] = [_summary(r, chosen)]
    if r.steps and step is None:
        parts.append(_steps(r.steps))
    if chosen.temporal.total_s:
        parts += [_kernels(chosen)]
    parts.append(_findings("Findings", _lines(chosen.findings)))
    if r.notes:
        parts.append(_findings("Not analysed", [f"• {note}" for note in r.notes]))
    return Panel(Group(*parts), title=title, title_align="left")


def _summary(r: RankAnalysis, w: WindowAnalysis) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_row("devices", _devices(r.devices))
    what = "whole trace" if w.step is None else f"step {w.step}"
    grid.add_row("window", f"{what}, {units.seconds(w.step_s)}")
    grid.add_row("bound", Text(w.bound.value, style="bold"))
    t = w.temporal
    if t.total_s:
        total = t.total_s
        shares = (
            ("compute", t.compute_s),
            ("communication", t.communication_s),
            ("memory", t.memory_s),
            ("other", t.other_s),
            ("idle", t.idle_s),
        )
        parts = ", ".join(f"{label} {units.percent(v / total)}" for label, v in shares)
        grid.add_row("device time", f"{parts} of {units.seconds(total)}")
        idle = w.idle
        if idle.idle_s:
            grid.add_row(
                "device idle",
                f"host wait {units.seconds(idle.host_wait_s)}, kernel wait"
                f" {units.seconds(idle.kernel_wait_s)}, other {units.seconds(idle.other_s)}",
            )
        if w.overlap.communication_s:
            overlapped = units.percent(w.overlap.fraction or 0)
            grid.add_row(
                "communication",
                f"{units.seconds(w.overlap.communication_s)}, {overlapped} overlapped with"
                f" compute, {units.seconds(w.overlap.exposed_s)} exposed",
            )
    if w.matmuls is not None:
        grid.add_row("matmuls", _matmuls(w.matmuls))
    launches = w.launches
    if launches.launches:
        grid.add_row(
            "launches",
            f"{launches.launches}, {units.seconds(launches.cpu_per_launch_s or 0)} CPU each, median"
            f" delay {units.seconds(launches.median_delay_s or 0)}, {launches.shorter_than_launch}"
            " kernels shorter than their launch",
        )
    h = w.host
    grid.add_row(
        "host",
        f"{h.ops} ops, data loading {units.seconds(h.data_loading_s)}, {h.syncs} syncs"
        f" ({units.seconds(h.sync_s)}), overhead {units.seconds(h.overhead_s)}",
    )
    if h.syncs and h.sync_while_idle_s is not None and h.sync_idle_gaps_s is not None:
        grid.add_row(
            "syncs",
            f"{units.seconds(h.sync_while_idle_s)} of the host's sync time with the device"
            f" idle; {units.seconds(h.sync_idle_gaps_s)} of device idle in gaps that began"
            " while the host waited in a sync",
        )
    if h.sync_calls or w.device_syncs:
        calls = ", ".join(f"{n} ×{c}" for n, c in {**h.sync_calls, **w.device_syncs}.items())
        grid.add_row("sync calls", calls)
    return grid


def _matmuls(m: MatmulStats) -> str:
    """One line on the window's matrix products: work, rate, and where they stand."""
    parts = [
        f"{m.ops} products, {units.count(m.flops, 'FLOP')} in {units.seconds(m.time_s)}"
        f" of kernels: {units.flops_rate(m.flops_per_s)}"
    ]
    sol = m.fraction_of_sol
    if sol is not None:
        parts.append(f"{units.percent(sol)} of their speed of light on {m.hardware}")
        if m.tf32_ops:
            parts.append(f"{m.tf32_ops} fp32 products faster than the fp32 peak (TF32)")
    if m.memory_bound_s:
        parts.append(f"{units.percent(m.memory_bound_s / m.time_s)} of their time memory-bound")
    if m.unaligned_s:
        parts.append(
            f"{units.percent(m.unaligned_s / m.time_s)} of it in 16-bit shapes not multiples of 8"
        )
    return "; ".join(parts)


def _steps(steps: list[WindowAnalysis]) -> RenderableType:
    table = _table("Steps")
    for column, width in (("step", 4), ("time", 7), ("busy", 7), ("comm", 7), ("data", 7)):
        table.add_column(column, justify="right", no_wrap=True, min_width=width)
    table.add_column("syncs", justify="right", no_wrap=True, min_width=5)
    table.add_column("bound", no_wrap=True, min_width=19)
    for w in steps:
        table.add_row(
            str(w.step),
            units.seconds(w.step_s),
            units.seconds(w.temporal.busy_s),
            units.seconds(w.temporal.communication_s),
            units.seconds(w.host.data_loading_s),
            str(w.host.syncs),
            w.bound.value,
        )
    return table


def _kernels(w: WindowAnalysis) -> RenderableType:
    table = _table("Top kernels")
    table.add_column("kernel", overflow="ellipsis")
    table.add_column("type", no_wrap=True)
    for column in ("count", "total", "mean"):
        table.add_column(column, justify="right", no_wrap=True)
    for k in w.kernels:
        table.add_row(
            short_kernel_name(k.name),
            k.type.value,
            str(k.count),
            units.seconds(k.total_s),
            units.seconds(k.mean_s),
        )
    return table


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)


def short_kernel_name(name: str) -> str:
    """A kernel's name without its return type, template arguments and parameters:
    `void at::native::f<float, 4>(int, float*)` → `at::native::f`."""
    cut = len(name)
    for mark in ("<", "("):
        at = name.find(mark)
        if at > 0:
            cut = min(cut, at)
    head = name[:cut].strip()
    return head.removeprefix("void ").strip() or name


def _devices(names: tuple[str, ...]) -> str:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(f"{c} × {n}" if c > 1 else n for n, c in counts.items()) or "—"


def _findings(title: str, lines: list[str]) -> RenderableType:
    if not lines:
        return Text(f"{title}: none.")
    return Group(Text(title, style="bold"), *(Text(line) for line in lines))


def _lines(findings: list[Finding]) -> list[str]:
    return [
        units.finding_line(f.kind.value, f.message, f.evidence.get("max_speedup")) for f in findings
    ]
