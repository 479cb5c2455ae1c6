"""FLOPs of elementwise ops, activations, `_foreach_` list ops and fused optimizer steps.

Counting rule: one FLOP for each arithmetic operation (+ − × ÷), each comparison or
selection (max, where, a relu), and each transcendental or special function (exp, log,
sqrt, rsqrt, tanh, erf, pow), per output element. A composite function counts the
operations of its usual formula, written next to it. Each convention covers the op,
its in-place `op_` variant, its `out=` overloads and its `_foreach_op(_)` list variants
(counted per element of every tensor in the list, like the single-tensor op).

Ops that only move, convert or allocate data (copies, casts, fills, concatenation,
indexing, random fills) are registered with 0 FLOPs, so they count as *known* zeros.
"""

from __future__ import annotations

from typing import Any

from lightspeed.measure.costs.flop_registry import (
    ShapeArgs,
    aten,
    aten_family,
    output_elements,
    per_element,
    register_flops,
    total_numel,
    zero_flops,
)


def _register_per_element(flops_per_element: int, *names: str) -> None:
    """Count `flops_per_element` per output element for each named op family."""
    targets = [packet for name in names for packet in aten_family(name)]
    register_flops(*targets)(per_element(flops_per_element))


# --- one FLOP per element ----------------------------------------------------------
# Arithmetic: one multiply, divide-by-reciprocal, negate or remainder per element.
_register_per_element(1, "mul", "neg", "reciprocal", "remainder", "fmod")
# Comparison and selection, one per element: maximum/minimum/clamp_min are one compare;
# relu is max(x, 0); threshold_backward is `grad if x > t else 0`; where and
# masked_fill pick one of two values; abs/sign/floor/round are one ALU op.
_register_per_element(
    1,
    *("maximum", "minimum", "fmax", "fmin", "clamp_min", "clamp_max"),
    *("relu", "threshold", "threshold_backward", "where", "masked_fill"),
    *("eq", "ne", "lt", "le", "gt", "ge"),
    *("logical_not", "logical_and", "logical_or", "logical_xor"),
    *("abs", "sign", "sgn", "floor", "ceil", "round", "trunc"),
)
# Transcendental and special functions: one per element, as one special-function-unit
# instruction. pow counts 1 whatever its exponent (x**2 is one multiply).
_register_per_element(
    1,
    *("exp", "exp2", "expm1", "log", "log2", "log10", "log1p"),
    *("sqrt", "rsqrt", "pow", "tanh", "erf", "erfc", "erfinv"),
    *("sin", "cos", "tan", "atan", "atan2"),
)

# --- a few FLOPs per element -------------------------------------------------------
# leaky_relu: x > 0 ? x : slope·x -> 1 compare + 1 multiply = 2. Its backward,
# grad·(x > 0 ? 1 : slope), is also 1 compare + 1 multiply = 2.
_register_per_element(2, "leaky_relu", "leaky_relu_backward")
# hardtanh: clamp to [lo, hi] -> 2 compares; backward: lo < x < hi ? grad : 0 -> 2 compares.
_register_per_element(2, "hardtanh", "hardtanh_backward")
# sigmoid_backward: grad·y·(1 − y) -> 1 subtract + 2 multiplies = 3.
# tanh_backward: grad·(1 − y²) -> 1 square + 1 subtract + 1 multiply = 3.
_register_per_element(3, "sigmoid_backward", "tanh_backward")
# lerp: self + weight·(end − self) -> subtract, multiply, add = 3.
# addcmul: self + value·t1·t2 -> 2 multiplies + 1 add = 3 (value is multiplied even when 1).
# addcdiv: self + value·t1/t2 -> divide, multiply, add = 3.
_register_per_element(3, "lerp", "addcmul", "addcdiv")
# sigmoid: 1 / (1 + exp(−x)) -> negate, exp, add, divide = 4.
_register_per_element(4, "sigmoid")
# silu: x·sigmoid(x) -> sigmoid 4 + multiply 1 = 5.
_register_per_element(5, "silu")
# silu_backward: grad·σ·(1 + x·(1 − σ)) -> σ 4, subtract, multiply, add, multiply by σ,
# multiply by grad = 9.
_register_per_element(9, "silu_backward")
# native_dropout_backward: grad·mask·scale -> 2 multiplies.
_register_per_element(2, "native_dropout_backward")


@register_flops(*aten_family("add"), *aten_family("sub"), *aten_family("rsub"))
def add_flops(a: ShapeArgs, out: Any) -> int:
    """add/sub/rsub: 1 per element, 2 when `alpha` ≠ 1 scales the second operand."""
    alpha = a.get("alpha", 1)
    return (1 if alpha == 1 else 2) * output_elements(a, out)


@register_flops(*aten_family("div"))
def div_flops(a: ShapeArgs, out: Any) -> int:
    """div: 1 per element; 2 with a `rounding_mode` (divide, then floor or truncate)."""
    return (1 if a.get("rounding_mode") is None else 2) * output_elements(a, out)


@register_flops(*aten_family("clamp"))
def clamp_flops(a: ShapeArgs, out: Any) -> int:
    """clamp: 1 compare per element per bound given (2 with both `min` and `max`)."""
    bounds = (a.get("min") is not None) + (a.get("max") is not None)
    return bounds * output_elements(a, out)


@register_flops(*aten_family("gelu"))
def gelu_flops(a: ShapeArgs, out: Any) -> int:
    """gelu, erf form: 0.5·x·(1 + erf(x/√2)) -> multiply, erf, add, 2 multiplies = 5.
    tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) -> x³ 2, ×c 1, +x 1, ×k 1,
    tanh 1, +1 1, ×x 1, ×0.5 1 = 9."""
    return (5 if a.get("approximate", "none") == "none" else 9) * output_elements(a, out)


@register_flops(*aten_family("gelu_backward"))
def gelu_backward_flops(a: ShapeArgs, out: Any) -> int:
    """gelu_backward, erf form: grad·(Φ(x) + x·φ(x)) -> Φ 4 (×1/√2, erf, +1, ×0.5),
    φ 4 (x², ×−0.5, exp, ×1/√(2π)), ×x, add, ×grad = 11.
    tanh form: inner 5 (x², x³, ×c, +x, ×k), tanh 1, 0.5·(1+t) 2, 1−t² 2,
    k·(1 + 3c·x²) 3, 0.5·x·(1−t²)·(…) 3, add 1, ×grad 1 = 18."""
    return (11 if a.get("approximate", "none") == "none" else 18) * output_elements(a, out)


@register_flops(*aten_family("native_dropout"))
def dropout_flops(a: ShapeArgs, out: Any) -> int:
    """native_dropout: x·mask·(1/(1−p)) -> 2 multiplies per input element (drawing the
    random mask is not counted); 0 when not training (the input is returned)."""
    return 0 if a.get("train") is False else 2 * total_numel(a["input"])


# --- fused optimizer steps ---------------------------------------------------------
# Adam per element, as torch's single-tensor and _foreach_ paths compute it:
#   m = lerp(m, g, 1−β1)                 3
#   v = β2·v + (1−β2)·g·g                4  (mul_ 1 + addcmul_ 3)
#   denom = sqrt(v) / √(1−β2ᵗ) + eps     3
#   p = p − lr/(1−β1ᵗ) · m / denom       3  (addcdiv_)
# = 13, plus weight decay (AdamW: p·(1 − lr·wd), 1; Adam: g + wd·p, 2), amsgrad
# (max(v_max, v), 1), maximize (−g, 1) and a GradScaler's unscale (g / scale, 1).
# Per-tensor scalars (the bias corrections) are not counted.
_ADAM_CORE_FLOPS_PER_ELEMENT = 13


def _adam_flops(a: ShapeArgs, weight_decay_flops: int) -> int:
    per = _ADAM_CORE_FLOPS_PER_ELEMENT
    per += weight_decay_flops if a["weight_decay"] != 0 else 0
    per += 1 if a["amsgrad"] else 0
    per += 1 if a["maximize"] else 0
    per += 1 if a.get("grad_scale") is not None else 0
    return per * total_numel(a["self"])


@register_flops(aten._fused_adamw_)
def fused_adamw_flops(a: ShapeArgs, out: Any) -> int:
    """AdamW step: 13 per parameter element (+1 decoupled weight decay, +1 amsgrad,
    +1 maximize, +1 grad unscale); 14 with the default weight_decay=0.01."""
    return _adam_flops(a, weight_decay_flops=1)


@register_flops(aten._fused_adam_)
def fused_adam_flops(a: ShapeArgs, out: Any) -> int:
    """Adam step: 13 per parameter element (+2 L2 weight decay, +1 amsgrad, +1 maximize,
    +1 grad unscale); 13 with the default weight_decay=0."""
    return _adam_flops(a, weight_decay_flops=2)


@register_flops(aten._fused_sgd_)
def fused_sgd_flops(a: ShapeArgs, out: Any) -> int:
    """SGD step per parameter element, as the single-tensor path computes it:
    p − lr·d 2; weight decay g + wd·p 2; momentum μ·buf + (1−dampening)·g 2 (3 with
    dampening ≠ 0; 0 on the first step, which copies g); nesterov g + μ·buf 2;
    maximize −g 1; grad unscale g / scale 1."""
    per = 2
    per += 2 if a["weight_decay"] != 0 else 0
    if a["momentum"] != 0:
        if not a["is_first_step"]:
            per += 2 if a["dampening"] == 0 else 3
        per += 2 if a["nesterov"] else 0
    per += 1 if a["maximize"] else 0
    per += 1 if a.get("grad_scale") is not None else 0
    return per * total_numel(a["self"])


# --- known zeros: data movement, conversion, allocation ------------------------------
_DATA_MOVEMENT = (
    *("_to_copy", "clone", "copy", "_copy_from", "_copy_from_and_resize", "lift_fresh_copy"),
    *("fill", "zero", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like"),
    *("empty", "empty_like", "empty_strided", "empty_permuted", "new_empty"),
    *("new_empty_strided", "new_zeros", "new_ones", "new_full", "scalar_tensor", "arange"),
    *("cat", "stack", "index", "_unsafe_index", "index_select", "gather", "scatter"),
    *("constant_pad_nd", "slice_scatter", "select_scatter", "diagonal_scatter"),
    *("as_strided_scatter", "repeat", "flip", "roll", "tril", "triu", "embedding"),
    *("_local_scalar_dense", "nonzero", "masked_select"),
    *("rand", "randn", "randint", "randperm", "rand_like", "randn_like"),
    *("normal", "uniform", "bernoulli", "random", "exponential"),
    # functionalised graphs replace views by copies of them
    *("view_copy", "t_copy", "transpose_copy", "permute_copy", "expand_copy"),
    *("unsqueeze_copy", "squeeze_copy", "slice_copy", "select_copy", "alias_copy"),
    *("detach_copy", "split_copy", "split_with_sizes_copy", "unbind_copy", "as_strided_copy"),
)
register_flops(*(packet for name in _DATA_MOVEMENT for packet in aten_family(name)))(zero_flops)
