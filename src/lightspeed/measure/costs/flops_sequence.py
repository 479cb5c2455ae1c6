"""FLOPs of the mask ops that sequence models' losses and attention masks run.

`F.cross_entropy` with `label_smoothing` inverts its `ignore_index` mask with
`bitwise_not` before averaging the smoothing term, and padding and causal masks are
combined with `&`, `|` and `^` (`bitwise_and`, `bitwise_or`, `bitwise_xor`). Each is one
ALU operation per output element, so each counts 1 FLOP per element, as the logical
ops (`logical_not`, `logical_and`…) do in `flops_pointwise`. The convention covers
every overload (tensor–tensor, tensor–scalar, `out=`), the in-place `op_` variants and
the `_foreach_` list variants where torch has them.
"""

from __future__ import annotations

from lightspeed.measure.costs.flop_registry import aten_family, per_element, register_flops

_BITWISE = ("bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor")
register_flops(*(packet for name in _BITWISE for packet in aten_family(name)))(per_element(1))
