"""Terminal reports as rich renderables; the CLI prints them on a Console it owns.

Functions here only arrange numbers they are given, so a test renders them on a
Console of fixed width with no colour and compares text.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lightspeed import units
from lightspeed.analysis.roofline import Ceilings, RooflinePoint
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.timing import StepTiming, WorkloadInfo


def hardware_list(entries: Sequence[Hardware]) -> RenderableType:
    """One row per hardware: id, dense peaks (TFLOP/s), bandwidth (GB/s), memory (GiB)."""
    table = Table(
        title="Hardware catalog: dense peaks in TFLOP/s, memory in GB/s and GiB",
        title_justify="left",
        box=box.SIMPLE,
    )
    table.add_column("id", no_wrap=True)
    for header in ("fp32", "tf32", "bf16", "fp16", "fp8"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("GB/s", justify="right", no_wrap=True)
    table.add_column("GiB", justify="right", no_wrap=True)
    for hw in entries:
        peaks = [_peak_tflops(hw, key) for key in ("fp32", "tf32", "bf16", "fp16", "fp8")]
        memory = "—" if hw.memory_bytes is None else f"{hw.memory_bytes / 2**30:.0f}"
        table.add_row(hw.id, *peaks, f"{hw.memory_bandwidth_bytes_per_s / 1e9:,.0f}", memory)
    return table


def _peak_tflops(hw: Hardware, key: str) -> str:
    for precision, value in hw.peak_flops_per_s.items():
        if precision.value == key:
            return f"{value / 1e12:.4g}"
    return "—"


def hardware_details(hw: Hardware) -> RenderableType:
    """Every number of `hw` with its ridge point and source; the calibration if measured."""
    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column("precision")
    table.add_column("peak", justify="right")
    table.add_column("ridge point", justify="right")
    for precision, peak in hw.peak_flops_per_s.items():
        ridge = Ceilings.of(hw, precision).ridge_flops_per_byte
        table.add_row(precision.value, units.flops_rate(peak), f"{ridge:.3g} FLOP/B")
    facts = Table.grid(padding=(0, 2))
    facts.add_row("memory bandwidth", units.byte_rate(hw.memory_bandwidth_bytes_per_s))
    if hw.cache_bandwidth_bytes_per_s is not None:
        facts.add_row(
            "cache bandwidth",
            f"{units.byte_rate(hw.cache_bandwidth_bytes_per_s)} (work within"
            f" {units.size(hw.cache_bytes)})",
        )
    facts.add_row("memory", units.size(hw.memory_bytes))
    if hw.sm_count is not None:
        facts.add_row("SMs", str(hw.sm_count))
    if hw.gpu_link_bytes_per_s is not None:
        facts.add_row("GPU–GPU link", units.byte_rate(hw.gpu_link_bytes_per_s))
    if hw.host_link_bytes_per_s is not None:
        facts.add_row("host link", units.byte_rate(hw.host_link_bytes_per_s))
    parts: list[RenderableType] = [table, Text(""), facts]
    cal = hw.calibration
    if cal is not None:
        measured = Table.grid(padding=(0, 2))
        for label, rates in (
            ("memory", cal.memory_kernel_bytes_per_s),
            ("cache", cal.cache_kernel_bytes_per_s),
        ):
            if rates:
                measured.add_row(
                    label, ", ".join(f"{k} {units.byte_rate(v)}" for k, v in rates.items())
                )
        sizes = ", ".join(f"{p.value} n={n}" for p, n in cal.best_matmul_size.items())
        measured.add_row("best matmul", sizes)
        measured.add_row(
            "library", f"{cal.library}, {cal.threads} threads, torch {cal.torch_version}"
        )
        measured.add_row("method", cal.method)
        when = f"{cal.measured_at} in {units.seconds(cal.duration_s or 0)}"
        if cal.load_average is not None:
            when += f", load average {cal.load_average:.2f}"
        measured.add_row("measured", when)
        parts += [Text(""), Text("Calibration", style="bold"), measured]
    else:
        sources = Table.grid(padding=(0, 2))
        sources.add_column(no_wrap=True)
        sources.add_column(overflow="fold")
        for field, source in hw.sources.items():
            sources.add_row("all numbers" if field == "*" else field, source)
        parts += [Text(""), Text("Sources", style="bold"), sources]
    title = f"{hw.name} ({hw.id}, {hw.kind.value})"
    return Panel(Group(*parts), title=title, title_align="left")


def roofline_summary(point: RooflinePoint, hardware: Hardware | None) -> RenderableType:
    """Intensity, ridge point, bound, attainable rate and SoL time of one point."""
    grid = Table.grid(padding=(0, 2))
    if hardware is not None:
        grid.add_row("hardware", f"{hardware.name} ({hardware.id})")
    grid.add_row("work", f"{units.count(point.flops, 'FLOP')}, {units.size(point.bytes)} moved")
    grid.add_row(
        "ceilings",
        f"{units.flops_rate(point.ceilings.peak_flops_per_s)},"
        f" {units.byte_rate(point.ceilings.bandwidth_bytes_per_s)}",
    )
    grid.add_row("intensity", f"{point.intensity_flops_per_byte:.4g} FLOP/B")
    grid.add_row("ridge point", f"{point.ridge_flops_per_byte:.4g} FLOP/B")
    grid.add_row("bound", Text(point.bound.value, style="bold"))
    grid.add_row("attainable", units.flops_rate(point.attainable_flops_per_s))
    grid.add_row(
        "speed of light",
        f"{units.seconds(point.sol_time_s)} (compute {units.seconds(point.compute_time_s)},"
        f" memory {units.seconds(point.memory_time_s)})",
    )
    return Panel(grid, title="Roofline", title_align="left")


def workload_line(wl: WorkloadInfo) -> str:
    """`name: batch B, dtype on device, N parameters`."""
    return (
        f"{wl.name}: batch {wl.batch_size}, {wl.precision.value} on {wl.device.value},"
        f" {units.count(wl.parameter_count or 0)} parameters"
    )


def timing_report(timing: StepTiming, hardware: Hardware | None) -> RenderableType:
    """Step time with its spread, throughput, and the hardware it ran on."""
    wl = timing.workload
    m = timing.measurement
    grid = Table.grid(padding=(0, 2))
    grid.add_row("workload", workload_line(wl))
    grid.add_row(
        "step time",
        Text(f"{units.seconds(m.median_s)} median", style="bold")
        + Text(
            f"  (IQR {units.seconds(m.iqr_s)}, min {units.seconds(m.min_s)},"
            f" max {units.seconds(m.max_s)})"
        ),
    )
    grid.add_row(
        "replicates",
        f"{m.n} × {m.steps_per_replicate} step{'s' if m.steps_per_replicate > 1 else ''}"
        f" after {m.warmup_steps} warm-up",
    )
    grid.add_row("throughput", f"{timing.samples_per_s:,.1f} samples/s")
    if timing.tokens_per_s is not None:
        grid.add_row("", f"{timing.tokens_per_s:,.0f} tokens/s")
    parts: list[RenderableType] = [grid]
    for warning in m.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    panels: list[RenderableType] = [Panel(Group(*parts), title="Step timing", title_align="left")]
    if hardware is not None:
        panels.append(hardware_summary(hardware))
    return Group(*panels)


def hardware_summary(hw: Hardware) -> RenderableType:
    """The ceilings of `hw` in a few lines, and where they come from."""
    grid = Table.grid(padding=(0, 2))
    peaks = ", ".join(f"{p.value} {units.flops_rate(v)}" for p, v in hw.peak_flops_per_s.items())
    grid.add_row("peaks", peaks)
    grid.add_row(
        "memory",
        f"{units.byte_rate(hw.memory_bandwidth_bytes_per_s)}, {units.size(hw.memory_bytes)}",
    )
    if hw.calibration is not None:
        cal = hw.calibration
        origin = (
            f"measured here {cal.measured_at} ({cal.library}, {cal.threads} threads);"
            " `lightspeed hw show local` for details"
        )
    else:
        origin = f"datasheet; `lightspeed hw show {hw.id}` for sources"
    grid.add_row("source", origin)
    return Panel(grid, title=f"Hardware: {hw.name} ({hw.id})", title_align="left")
