"""Reports on hardware and on one point of a roofline, built once as Documents: the
catalog, one device's numbers with their sources or calibration, and `roofline`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lightspeed.analysis.roofline import Ceilings, RooflinePoint, roofline_to_dict
from lightspeed.document import (
    Column,
    Document,
    Fields,
    Line,
    Section,
    Style,
    Table,
    Unit,
    Value,
    line,
)
from lightspeed.dtypes import Precision
from lightspeed.facts.hardware import (
    Hardware,
    MemoryLevel,
    hardware_to_dict,
    read_write_ratio,
)

_LIST_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


def hardware_list_document(entries: Sequence[Hardware]) -> Document:
    """One row per hardware: id, dense peaks (TFLOP/s), bandwidth (GB/s), memory (GiB)."""
    rows: list[tuple[str | Value, ...]] = []
    for hw in entries:
        peaks = {p.value: v for p, v in hw.peak_flops_per_s.items()}
        rows.append(
            (
                hw.id,
                *(
                    Value(None if key not in peaks else peaks[key] / 1e12, Unit.NUMBER, ".4g")
                    for key in _LIST_PRECISIONS
                ),
                Value(hw.memory_bandwidth_bytes_per_s / 1e9, Unit.NUMBER, ",.0f"),
                Value(
                    None if hw.memory_bytes is None else hw.memory_bytes / 2**30, Unit.NUMBER, ".0f"
                ),
            )
        )
    table = Table(
        title="Hardware catalog: dense peaks in TFLOP/s, memory in GB/s and GiB",
        columns=(
            Column("id", "id"),
            *(Column(key, key, numeric=True) for key in _LIST_PRECISIONS),
            Column("memory_bandwidth_gb_per_s", "GB/s", numeric=True),
            Column("memory_gib", "GiB", numeric=True),
        ),
        rows=tuple(rows),
        framed=True,
    )
    data = {"hardware": [hardware_to_dict(h) for h in entries]}
    return Document(kind="hardware_list", data=data, sections=(table,))


def peak_kernel(hw: Hardware, precision: Precision) -> str | None:
    """The calibration kernel that set `precision`'s peak; None for a datasheet peak."""
    return None if hw.calibration is None else hw.calibration.peak_kernel(precision)


def memory_kernel(hw: Hardware, level: MemoryLevel) -> str | None:
    """The bandwidth kernel that set `level`'s roof; None for a datasheet figure."""
    return None if hw.calibration is None else hw.calibration.memory_roof_kernel(level)


def hardware_document(hw: Hardware) -> Document:
    """Every number of `hw` with its ridge point and source; the calibration if measured,
    with each compute kernel's rate and the kernel that set each roof."""
    cal = hw.calibration
    set_by = (Column("set_by", "set by"),) if cal is not None else ()
    # The matrix units' peaks, where some differ from the vector rate (AMD Instinct).
    matrix = hw.matrix_peak_flops_per_s
    matrix_column = (Column("matrix_peak_flops_per_s", "matrix peak", numeric=True),)
    peaks = Table(
        title="",
        columns=(
            Column("precision", "precision"),
            Column("peak_flops_per_s", "peak", numeric=True),
            *(matrix_column if matrix else ()),
            Column("ridge_flops_per_byte", "ridge point", numeric=True),
            *set_by,
        ),
        rows=tuple(
            (
                precision.value,
                Value(peak, Unit.FLOP_RATE),
                *((Value(hw.matmul_peak(precision), Unit.FLOP_RATE),) if matrix else ()),
                Value(
                    Ceilings.of(hw, precision).ridge_flops_per_byte, Unit.NUMBER, ".3g", " FLOP/B"
                ),
                *((peak_kernel(hw, precision) or "",) if cal is not None else ()),
            )
            for precision, peak in hw.peak_flops_per_s.items()
        ),
    )
    dram_kernel = memory_kernel(hw, MemoryLevel.DRAM)
    facts: list[tuple[str, Line]] = [
        (
            "memory bandwidth",
            line(
                Value(hw.memory_bandwidth_bytes_per_s, Unit.BYTE_RATE),
                f" (set by {dram_kernel})" if dram_kernel else "",
            ),
        )
    ]
    if hw.cache_bandwidth_bytes_per_s is not None:
        cache_kernel = memory_kernel(hw, MemoryLevel.CACHE)
        facts.append(
            (
                "cache bandwidth",
                line(
                    Value(hw.cache_bandwidth_bytes_per_s, Unit.BYTE_RATE),
                    " (work within ",
                    Value(hw.cache_bytes, Unit.BYTES),
                    f"; set by {cache_kernel})" if cache_kernel else ")",
                ),
            )
        )
    facts.append(("memory", line(Value(hw.memory_bytes, Unit.BYTES))))
    if hw.l2_bytes is not None:
        facts.append(("L2 cache", line(Value(hw.l2_bytes, Unit.BYTES))))
    if hw.sm_count is not None:
        facts.append(("SMs", line(str(hw.sm_count))))
    if hw.clock_hz is not None:
        facts.append(("boost clock", line(Value(hw.clock_hz / 1e6, Unit.NUMBER, ",.0f", " MHz"))))
    if hw.board_power_w is not None:
        facts.append(("board power", line(Value(hw.board_power_w, Unit.NUMBER, ",.0f", " W"))))
    if hw.vendor is not None:
        facts.append(("GPU vendor", line(hw.vendor)))
    if hw.process_nm is not None:
        facts.append(("process node", line(Value(hw.process_nm, Unit.NUMBER, "g", " nm"))))
    if hw.transistors_per_mm2 is not None:
        density = Value(hw.transistors_per_mm2 / 1e6, Unit.NUMBER, ",.1f", " million per mm²")
        facts.append(("transistor density", line(density)))
    if hw.gpu_link_bytes_per_s is not None:
        facts.append(("GPU–GPU link", line(Value(hw.gpu_link_bytes_per_s, Unit.BYTE_RATE))))
    if hw.host_link_bytes_per_s is not None:
        facts.append(("host link", line(Value(hw.host_link_bytes_per_s, Unit.BYTE_RATE))))
    blocks: list[Table | Fields] = [peaks, Fields(tuple(facts))]
    if cal is not None and cal.compute_kernel_flops_per_s:
        blocks.append(compute_kernel_table(cal.compute_kernel_flops_per_s))
    if cal is not None:
        measured: list[tuple[str, Line]] = []
        for label, rates in (
            ("memory", cal.memory_kernel_bytes_per_s),
            ("cache", cal.cache_kernel_bytes_per_s),
        ):
            if rates:
                spans: list[str | Value] = []
                for i, (kernel, rate) in enumerate(rates.items()):
                    spans += [
                        ", " if i else "",
                        f"{kernel} ({read_write_ratio(kernel)}) ",
                        Value(rate, Unit.BYTE_RATE),
                    ]
                measured.append((label, line(*spans)))
        sizes = ", ".join(f"{p.value} n={n}" for p, n in cal.best_matmul_size.items())
        when = line(f"{cal.measured_at} in ", Value(cal.duration_s or 0, Unit.SECONDS))
        if cal.load_average is not None:
            when += (f", load average {cal.load_average:.2f}",)
        if cal.canary_flops_per_s is not None:
            measured.append(
                (
                    "canary",
                    line(f"{cal.canary_kernel} ", Value(cal.canary_flops_per_s, Unit.FLOP_RATE)),
                )
            )
        measured += [
            ("best matmul", line(sizes)),
            ("library", line(f"{cal.library}, {cal.threads} threads, torch {cal.torch_version}")),
            ("method", line(cal.method)),
            ("measured", when),
        ]
        blocks.append(Fields(tuple(measured), title="Calibration"))
    else:
        # A field cited to the document that covers all numbers is not shown twice.
        sources = tuple(
            ("all numbers" if field == "*" else field, line(source))
            for field, source in hw.sources.items()
            if field == "*" or source != hw.sources.get("*")
        )
        blocks.append(Fields(sources, title="Sources"))
    section = Section(f"{hw.name} ({hw.id}, {hw.kind.value})", tuple(blocks))
    return Document(kind="hardware", data=hardware_to_dict(hw), sections=(section,))


def compute_kernel_table(rates: Mapping[Precision, Mapping[str, float]]) -> Table:
    """Each calibration compute kernel's best rate (FLOP/s) in each precision."""
    kernels = list(dict.fromkeys(k for per_kernel in rates.values() for k in per_kernel))
    return Table(
        title="Compute kernels (best over sizes)",
        columns=(
            Column("kernel", "kernel"),
            *(Column(p.value, p.value, numeric=True) for p in rates),
        ),
        rows=tuple(
            (kernel, *(Value(rates[p].get(kernel), Unit.FLOP_RATE) for p in rates))
            for kernel in kernels
        ),
    )


def hardware_summary(hw: Hardware) -> Section:
    """The ceilings of `hw` in a few lines, and where they come from."""
    peaks: list[str | Value] = []
    for i, (p, v) in enumerate(hw.peak_flops_per_s.items()):
        kernel = peak_kernel(hw, p)
        peaks += [", " if i else "", f"{p.value} ", Value(v, Unit.FLOP_RATE)]
        peaks += [f" ({kernel})"] if kernel else []
    memory: list[str | Value] = [Value(hw.memory_bandwidth_bytes_per_s, Unit.BYTE_RATE)]
    kernel = memory_kernel(hw, MemoryLevel.DRAM)
    memory += [f" ({kernel})"] if kernel else []
    if hw.cache_bandwidth_bytes_per_s is not None:
        memory += [", cache ", Value(hw.cache_bandwidth_bytes_per_s, Unit.BYTE_RATE)]
        kernel = memory_kernel(hw, MemoryLevel.CACHE)
        memory += [f" ({kernel})"] if kernel else []
    if hw.calibration is not None:
        cal = hw.calibration
        origin = (
            f"measured here {cal.measured_at} ({cal.library}, {cal.threads} threads);"
            " `lightspeed hw show local` for details"
        )
    else:
        origin = f"datasheet; `lightspeed hw show {hw.id}` for sources"
    rows: tuple[tuple[str, Line], ...] = (
        ("peaks", line(*peaks)),
        ("bandwidth", line(*memory)),
        ("memory", line(Value(hw.memory_bytes, Unit.BYTES))),
        ("source", line(origin)),
    )
    return Section(f"Hardware: {hw.name} ({hw.id})", (Fields(rows),))


def roofline_document(point: RooflinePoint, hardware: Hardware | None) -> Document:
    """Intensity, ridge point, bound, attainable rate and SoL time of one point."""
    rows: list[tuple[str, Line]] = []
    if hardware is not None:
        rows.append(("hardware", line(f"{hardware.name} ({hardware.id})")))
    rows += [
        (
            "work",
            line(Value(point.flops, Unit.FLOPS), ", ", Value(point.bytes, Unit.BYTES), " moved"),
        ),
        (
            "ceilings",
            line(
                Value(point.ceilings.peak_flops_per_s, Unit.FLOP_RATE),
                ", ",
                Value(point.ceilings.bandwidth_bytes_per_s, Unit.BYTE_RATE),
            ),
        ),
        ("intensity", line(Value(point.intensity_flops_per_byte, Unit.NUMBER, ".4g", " FLOP/B"))),
        ("ridge point", line(Value(point.ridge_flops_per_byte, Unit.NUMBER, ".4g", " FLOP/B"))),
        ("bound", line(Value(point.bound.value, style=Style.BOLD))),
        ("attainable", line(Value(point.attainable_flops_per_s, Unit.FLOP_RATE))),
        (
            "speed of light",
            line(
                Value(point.sol_time_s, Unit.SECONDS),
                " (compute ",
                Value(point.compute_time_s, Unit.SECONDS),
                ", memory ",
                Value(point.memory_time_s, Unit.SECONDS),
                ")",
            ),
        ),
    ]
    data = {**roofline_to_dict(point), "hardware": None if hardware is None else hardware.id}
    return Document(
        kind="roofline", data=data, sections=(Section("Roofline", (Fields(tuple(rows)),)),)
    )
