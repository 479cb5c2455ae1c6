"""FLOPs of pooling and of the backward ops that scatter a gradient into zeros.

Counting rule (as in `flops_reduction`): a window of k elements reduced into one output
counts k (compares for max, adds for average), an average adds 1 divide per output.
"""

from __future__ import annotations

import math
from typing import Any

from lightspeed.measure.costs.flop_registry import (
    ShapeArgs,
    aten,
    aten_family,
    first_output_numel,
    numel,
    register_flops,
    zero_flops,
)


def _window(kernel_size: list[int], spatial_dims: int) -> int:
    """Elements in a pooling window; a single size means a cube (`kernel_size=[3]` is 3×3)."""
    if len(kernel_size) == 1:
        return kernel_size[0] ** spatial_dims
    return math.prod(kernel_size)


def _spatial_dims(a: ShapeArgs) -> int:
    """2 or 3: the pooled dimensions, from the length of an explicit kernel or output size."""
    sizes = a.get("kernel_size") or a.get("output_size") or ()
    return len(sizes) if len(sizes) > 1 else 2


@register_flops(aten.max_pool2d_with_indices, aten.max_pool3d_with_indices)
def max_pool_flops(a: ShapeArgs, out: Any) -> int:
    """max pooling: one compare per window element per output element."""
    return _window(a["kernel_size"], _spatial_dims(a)) * first_output_numel(out)


@register_flops(
    aten.max_pool2d_with_indices_backward,
    aten.max_pool3d_with_indices_backward,
    aten.adaptive_max_pool2d_backward,
    aten.adaptive_max_pool3d_backward,
)
def max_pool_backward_flops(a: ShapeArgs, out: Any) -> int:
    """max pooling backward: add each output gradient at its argmax -> 1 per grad element."""
    return numel(a["grad_output"])


@register_flops(*aten_family("avg_pool2d"), *aten_family("avg_pool3d"))
def avg_pool_flops(a: ShapeArgs, out: Any) -> int:
    """average pooling: window adds + 1 divide per output element."""
    return (_window(a["kernel_size"], _spatial_dims(a)) + 1) * first_output_numel(out)


@register_flops(aten.avg_pool2d_backward, aten.avg_pool3d_backward)
def avg_pool_backward_flops(a: ShapeArgs, out: Any) -> int:
    """average pooling backward: divide each gradient once, add it to its window's inputs."""
    return (_window(a["kernel_size"], _spatial_dims(a)) + 1) * numel(a["grad_output"])


@register_flops(aten._adaptive_avg_pool2d, aten._adaptive_avg_pool3d)
def adaptive_avg_pool_flops(a: ShapeArgs, out: Any) -> int:
    """adaptive average pooling: 1 add per input element + 1 divide per output element
    (windows of adjacent outputs can overlap by a row; that overlap is not counted)."""
    return numel(a["self"]) + first_output_numel(out)


@register_flops(aten._adaptive_avg_pool2d_backward, aten._adaptive_avg_pool3d_backward)
def adaptive_avg_pool_backward_flops(a: ShapeArgs, out: Any) -> int:
    """adaptive average pooling backward: 1 divide per gradient + 1 add per input element."""
    return numel(a["grad_output"]) + numel(a["self"])


@register_flops(aten.adaptive_max_pool2d, aten.adaptive_max_pool3d)
def adaptive_max_pool_flops(a: ShapeArgs, out: Any) -> int:
    """adaptive max pooling: 1 compare per input element (overlaps not counted)."""
    return numel(a["self"])


# The backward of a view writes the gradient into a zero tensor of the input's size:
# data movement only.
register_flops(aten.select_backward, aten.slice_backward, aten.diagonal_backward)(zero_flops)
