"""Facts one training step yields: per-op records and the memory it holds, by category.

Plain frozen dataclasses with units in their field names; `analysis/` and `report/`
read them, `measure/` makes them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping


class Phase(str, enum.Enum):
    """Which part of a training step an op ran in."""

    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    DATA = "data"


# The module path of ops that run outside the model (the optimizer's update).
OPTIMIZER_MODULE = "(optimizer)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpRecord:
    """One aten op call of a step.

    `name` is the aten overload packet ("aten::mm"); `module` the fully qualified path of
    the innermost module it ran in, from the model root ("" for the root itself, and
    `OPTIMIZER_MODULE` for the optimizer). FLOPs count a multiply-accumulate as 2; `macs`
    is set for matmul-class ops only. `bytes_read`/`bytes_written` count unique storages.
    `time_s` is the measured time attributed to it (CPU time on the CPU, kernel time on a
    GPU), None when the profiled run could not match it. `channels_last`: whether its
    first 4-D or 5-D tensor input in a definite layout was channels-last (True) or plain
    contiguous NCHW (False); None: no such input, or not recorded.
    """

    index: int
    name: str
    module: str
    phase: Phase
    input_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    flops: int
    macs: int | None
    bytes_read: int
    bytes_written: int
    flops_known: bool = True
    causal: bool = False
    time_s: float | None = None
    channels_last: bool | None = None

    @property
    def bytes(self) -> int:
        """Bytes moved: read + written."""
        return self.bytes_read + self.bytes_written


# The memory categories, in report order; MemoryBreakdown has a `<name>_bytes` for each.
MEMORY_CATEGORIES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "inputs",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryOverStep:
    """Bytes live by category over one step, as the allocation replay saw them.

    Point `i` is the state after `op_index[i]` ops of the step had run: `bytes[name][i]`
    bytes of category `name` were live (the categories of `MEMORY_CATEGORIES`). A long
    step keeps a sample of its points that always includes the peak, so the largest sum
    over categories equals the replay's peak. `phases` gives each phase's span as
    (phase, first op, op after the last), in the order the step ran them.
    """

    op_index: tuple[int, ...]
    bytes: Mapping[str, tuple[int, ...]]
    phases: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self) -> None:
        if any(len(series) != len(self.op_index) for series in self.bytes.values()):
            raise ValueError("every category needs one value per point of the step")

    def totals(self) -> tuple[int, ...]:
        """Bytes live at each point, all categories together."""
        return tuple(sum(column) for column in zip(*self.bytes.values(), strict=True))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes held by a training step, by category, and the peak during the step.

    parameters_bytes: the model's parameters. gradients_bytes: their .grad tensors after
    backward. optimizer_state_bytes: every tensor in optimizer.state (moments, step
    counters). activations_bytes: the most bytes saved for backward live at once (unique
    storages, excluding parameters and inputs). inputs_bytes: the batch on the device.
    temporaries_bytes: bytes live at the peak that belong to none of the above.
    peak_bytes: the most bytes live at once during the step. `at_peak_bytes`: bytes live
    at the moment of the peak, by the same category names; they sum to `peak_bytes`.
    `method` says how it was measured ("cuda-allocator" or "tracked-storages").
    `over_step`: the bytes live by category as the step ran (None when not recorded).
    """

    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_bytes: int
    temporaries_bytes: int
    inputs_bytes: int
    peak_bytes: int
    at_peak_bytes: Mapping[str, int]
    method: str
    over_step: MemoryOverStep | None = None

    def __post_init__(self) -> None:
        if min(self.categories().values()) < 0 or self.peak_bytes < 0:
            raise ValueError(f"memory categories cannot be negative: {self}")

    def categories(self) -> dict[str, int]:
        """Bytes per category name (parameters, gradients, …, inputs)."""
        return {name: getattr(self, f"{name}_bytes") for name in MEMORY_CATEGORIES}
