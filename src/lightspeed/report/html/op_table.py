"""Every op of a profile in one table, the most headroom (time above its speed of light)
first, sortable by any column and filtered by typing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightspeed.analysis.diagnosis import shapes_text
from lightspeed.document import Unit, Value
from lightspeed.facts.hardware import MemoryLevel
from lightspeed.report.html.markup import Column, Markup, Page
from lightspeed.report.profile_report import bound_label
from lightspeed.rules import Bound


def op_label(op: Mapping[str, Any]) -> str:
    """The op's name without `aten::`, and its call order: `addmm #4`."""
    return f"{op['name'].removeprefix('aten::')} #{op['index']}"


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
    bound = op.get("bound")
    level = MemoryLevel(op.get("memory_level") or MemoryLevel.DRAM.value)
    return bound_label(None if bound is None else Bound(bound), level)


def op_table(page: Page, doc: Mapping[str, Any]) -> Markup:
    """Every op, the most headroom (time above its speed of light) first."""

    def headroom(op: Mapping[str, Any]) -> float:
        return (op.get("time_s") or 0.0) - (op.get("sol_time_s") or 0.0)

    ops = sorted(doc["ops"], key=lambda op: (-headroom(op), op["index"]))
    rows = [
        (
            op_label(op),
            op["module"] or "(root)",
            op["phase"],
            shapes_text(op.get("input_shapes") or ()),
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
