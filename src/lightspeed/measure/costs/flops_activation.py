"""FLOPs of the piecewise-linear "hard" activations and their backward ops.

Counting rule as in `flops_pointwise`: one FLOP per arithmetic operation, comparison or
selection, per output element, each function counted by its usual formula written
next to it. A clamp to [0, 6] (ReLU6) is 2 compares; a divide by a constant counts 1.
Each convention covers the op, its in-place `op_` variant and its `out=` overloads.
"""

from __future__ import annotations

from lightspeed.measure.costs.flop_registry import aten_family, per_element, register_flops


def _register_per_element(flops_per_element: int, *names: str) -> None:
    """Count `flops_per_element` per output element for each named op family."""
    targets = [packet for name in names for packet in aten_family(name)]
    register_flops(*targets)(per_element(flops_per_element))


# hardsigmoid: ReLU6(x + 3) / 6 -> add 1, clamp to [0, 6] 2, divide 1 = 4.
_register_per_element(4, "hardsigmoid")
# hardswish: x · ReLU6(x + 3) / 6 -> hardsigmoid 4 + multiply by x 1 = 5.
_register_per_element(5, "hardswish")
# hardsigmoid_backward: −3 < x < 3 ? grad / 6 : 0 -> 2 compares + 1 divide = 3.
_register_per_element(3, "hardsigmoid_backward")
# hardswish_backward: x < −3 ? 0 : x ≤ 3 ? grad · (x / 3 + 0.5) : grad
# -> 2 compares, divide, add, multiply = 5.
_register_per_element(5, "hardswish_backward")
