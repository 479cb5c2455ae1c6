"""FLOPs of reductions, softmax, normalisations, losses and accumulating scatters.

Counting rule (as in `flops_pointwise`): one FLOP per arithmetic operation, comparison
or special function. A reduction over n elements counts n (not n − 1, as torch counts
2·K rather than 2·K − 1 per matmul output). Finishing a statistic (a mean's divide, a
variance's +eps and rsqrt) counts per reduced row, as written next to each formula.
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
    total_numel,
)

_MEAN_REDUCTION = 1  # torch's Reduction enum: 0 none, 1 mean, 2 sum


def _normalized_rows(a: ShapeArgs) -> int:
    """Rows a layer or RMS norm normalises: its input over its normalized_shape."""
    return numel(a["input"]) // max(numel(a["normalized_shape"]), 1)


# --- reductions --------------------------------------------------------------------


@register_flops(
    *aten_family("sum"),
    *aten_family("amax"),
    *aten_family("amin"),
    *aten_family("argmax"),
    *aten_family("argmin"),
    *aten_family("prod"),
    *aten_family("any"),
    *aten_family("all"),
    *aten_family("cumsum"),
)
def reduce_flops(a: ShapeArgs, out: Any) -> int:
    """sum, amax, amin, argmax, argmin, prod, any, all, cumsum: 1 per input element."""
    return total_numel(a["self"])


@register_flops(aten.sort)
def sort_flops(a: ShapeArgs, out: Any) -> int:
    """sort (and argsort, which calls it): a comparison sort's L·⌈log₂ L⌉ comparisons per
    row of L elements along `dim`."""
    shape = a["self"]
    if not shape:
        return 0
    length = shape[a.get("dim", -1)]
    rows = numel(shape) // max(length, 1)
    return rows * length * math.ceil(math.log2(length)) if length > 1 else 0


@register_flops(*aten_family("max"), *aten_family("min"))
def max_min_flops(a: ShapeArgs, out: Any) -> int:
    """max/min: the reductions count 1 per input element; the binary overloads
    (`max.other`) 1 compare per output element (which may be broadcast larger)."""
    return max(total_numel(a["self"]), first_output_numel(out))


@register_flops(*aten_family("mean"))
def mean_flops(a: ShapeArgs, out: Any) -> int:
    """mean: 1 add per input element + 1 divide per output element."""
    return total_numel(a["self"]) + first_output_numel(out)


@register_flops(*aten_family("var"), *aten_family("var_mean"))
def var_flops(a: ShapeArgs, out: Any) -> int:
    """var (and var_mean): sum for the mean, subtract, square, accumulate -> 4 per input
    element; divide for the mean and for the variance -> 2 per output element."""
    return 4 * total_numel(a["self"]) + 2 * first_output_numel(out)


@register_flops(*aten_family("std"), *aten_family("std_mean"))
def std_flops(a: ShapeArgs, out: Any) -> int:
    """std (and std_mean): var's 4 per input and 2 per output element, + 1 sqrt per output."""
    return 4 * total_numel(a["self"]) + 3 * first_output_numel(out)


@register_flops(*aten_family("linalg_vector_norm"))
def vector_norm_flops(a: ShapeArgs, out: Any) -> int:
    """linalg_vector_norm: |x|ᵖ and accumulate -> 2 per input element; the root -> 1 per output."""
    return 2 * total_numel(a["self"]) + first_output_numel(out)


@register_flops(aten._foreach_norm)
def foreach_norm_flops(a: ShapeArgs, out: Any) -> int:
    """_foreach_norm: 2 per element of every tensor + 1 root per tensor (as vector_norm)."""
    return 2 * total_numel(a["self"]) + len(a["self"])


@register_flops(*aten_family("logsumexp"))
def logsumexp_flops(a: ShapeArgs, out: Any) -> int:
    """logsumexp: max, subtract, exp, accumulate -> 4 per input element; log and add
    back the max -> 2 per output element."""
    return 4 * total_numel(a["self"]) + 2 * first_output_numel(out)


# --- softmax -----------------------------------------------------------------------


@register_flops(aten._softmax, aten._safe_softmax)
def softmax_flops(a: ShapeArgs, out: Any) -> int:
    """softmax: row max, subtract, exp, row sum, divide -> 5 per element."""
    return 5 * total_numel(a["self"])


@register_flops(aten._log_softmax)
def log_softmax_flops(a: ShapeArgs, out: Any) -> int:
    """log_softmax: row max, subtract, exp, row sum, subtract -> 5 per element, + 1 log per row."""
    self_shape = a["self"]
    rows = numel(self_shape) // self_shape[a["dim"]] if len(self_shape) else 1
    return 5 * numel(self_shape) + rows


@register_flops(aten._softmax_backward_data, aten._log_softmax_backward_data)
def softmax_backward_flops(a: ShapeArgs, out: Any) -> int:
    """softmax backward y·(g − Σ g·y): multiply, sum, subtract, multiply -> 4 per element.
    log_softmax backward g − exp(y)·Σ g: sum, exp, multiply, subtract -> 4 per element."""
    return 4 * total_numel(a["grad_output"])


# --- normalisation -----------------------------------------------------------------
# Forward, per element: mean-accumulate, subtract, square, variance-accumulate,
# multiply by rstd -> 5, + 1 for a weight and 1 for a bias. Per normalised row
# (per channel for batch norm): mean divide, variance divide, +eps, rsqrt -> 4.


def _norm_forward(elements: int, rows: int, weight: Any, bias: Any) -> int:
    affine = (weight is not None) + (bias is not None)
    return (5 + affine) * elements + 4 * rows


# Backward, per element: recompute x̂ = (x − mean)·rstd 2 (shared by the input and
# weight gradients); grad_input: g = dy·w 1 (with a weight), Σg, g·x̂, Σg·x̂, x̂·mean(g·x̂),
# g − mean(g), −, ·rstd -> 7; grad_weight: dy·x̂ and accumulate -> 2; grad_bias:
# accumulate dy -> 1. Per row: the two means' divides -> 2 (with grad_input).


def _norm_backward(elements: int, rows: int, weight: Any, mask: Any) -> int:
    grad_input, grad_weight, grad_bias = mask
    flops = 2 * elements if grad_input or grad_weight else 0
    if grad_input:
        flops += (7 + (weight is not None)) * elements + 2 * rows
    flops += 2 * elements if grad_weight else 0
    flops += elements if grad_bias else 0
    return flops


@register_flops(aten.native_layer_norm)
def layer_norm_flops(a: ShapeArgs, out: Any) -> int:
    """native_layer_norm: (5 + affine) per element + 4 per normalised row."""
    elements = numel(a["input"])
    rows = _normalized_rows(a)
    return _norm_forward(elements, rows, a["weight"], a["bias"])


@register_flops(aten.native_layer_norm_backward)
def layer_norm_backward_flops(a: ShapeArgs, out: Any) -> int:
    """native_layer_norm_backward: see the backward convention above."""
    elements = numel(a["input"])
    rows = _normalized_rows(a)
    return _norm_backward(elements, rows, a["weight"], a["output_mask"])


@register_flops(aten.native_group_norm)
def group_norm_flops(a: ShapeArgs, out: Any) -> int:
    """native_group_norm: (5 + affine) per element + 4 per (sample, group)."""
    return _norm_forward(numel(a["input"]), a["N"] * a["group"], a["weight"], a["bias"])


@register_flops(aten.native_group_norm_backward)
def group_norm_backward_flops(a: ShapeArgs, out: Any) -> int:
    """native_group_norm_backward: see the backward convention above."""
    rows = a["N"] * a["group"]
    return _norm_backward(numel(a["input"]), rows, a["weight"], a["output_mask"])


def _batch_norm(a: ShapeArgs, training: bool) -> int:
    """Training: statistics as layer norm, per channel; the running statistics update
    r = (1−m)·r + m·s -> 3 per channel per running buffer. Evaluation: (x − mean)·invstd
    -> 2 per element + affine, and +eps, rsqrt -> 2 per channel."""
    x = a["input"]
    elements, channels = numel(x), (x[1] if len(x) > 1 else 1)
    if not training:
        affine = (a.get("weight") is not None) + (a.get("bias") is not None)
        return (2 + affine) * elements + 2 * channels
    flops = _norm_forward(elements, channels, a.get("weight"), a.get("bias"))
    running = (a.get("running_mean") is not None) + (a.get("running_var") is not None)
    return flops + 3 * running * channels


@register_flops(
    aten.native_batch_norm,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional,
    aten.cudnn_batch_norm,
    aten.miopen_batch_norm,
)
def batch_norm_flops(a: ShapeArgs, out: Any) -> int:
    """Batch norm with a `training` flag: see `_batch_norm`."""
    return _batch_norm(a, training=bool(a["training"]))


@register_flops(aten._batch_norm_with_update, aten._batch_norm_with_update_functional)
def batch_norm_update_flops(a: ShapeArgs, out: Any) -> int:
    """Batch norm in training mode (updates the running statistics): see `_batch_norm`."""
    return _batch_norm(a, training=True)


@register_flops(aten._batch_norm_no_update, aten._native_batch_norm_legit_no_training)
def batch_norm_eval_flops(a: ShapeArgs, out: Any) -> int:
    """Batch norm in evaluation mode (normalises with the running statistics)."""
    return _batch_norm(a, training=False)


@register_flops(
    aten.native_batch_norm_backward,
    aten.batch_norm_backward,
    aten.cudnn_batch_norm_backward,
    aten.miopen_batch_norm_backward,
)
def batch_norm_backward_flops(a: ShapeArgs, out: Any) -> int:
    """Batch norm backward. Training: the normalisation backward convention above, per
    channel. Evaluation: grad_input = dy·w·invstd -> 1 per element (w·invstd per channel)."""
    x = a["input"]
    elements, channels = numel(x), (x[1] if len(x) > 1 else 1)
    mask = a.get("output_mask", (True, True, True))
    if not a.get("train", a.get("update", True)):
        grad_input, grad_weight, grad_bias = mask
        weight_grad_flops = 4 * elements if grad_weight else 0  # recompute x̂ 2 + dy·x̂, Σ 2
        return (elements if grad_input else 0) + weight_grad_flops + (elements if grad_bias else 0)
    return _norm_backward(elements, channels, a.get("weight"), mask)


@register_flops(aten._fused_rms_norm)
def rms_norm_flops(a: ShapeArgs, out: Any) -> int:
    """_fused_rms_norm: square, accumulate, multiply by rstd -> 3 per element (+1 with a
    weight); mean divide, +eps, rsqrt -> 3 per row."""
    elements = numel(a["input"])
    rows = _normalized_rows(a)
    return (3 + (a["weight"] is not None)) * elements + 3 * rows


@register_flops(aten._fused_rms_norm_backward)
def rms_norm_backward_flops(a: ShapeArgs, out: Any) -> int:
    """_fused_rms_norm_backward: x̂ = x·rstd 1; grad_input: g = dy·w 1 (with a weight),
    g·x̂, Σ, x̂·mean, subtract, ·rstd -> 5, + 1 divide per row; grad_weight: dy·x̂, Σ -> 2."""
    elements = numel(a["input"])
    rows = _normalized_rows(a)
    grad_input, grad_weight = a["output_mask"]
    flops = elements if grad_input or grad_weight else 0
    if grad_input:
        flops += (5 + (a["weight"] is not None)) * elements + rows
    return flops + (2 * elements if grad_weight else 0)


# --- losses, embedding, accumulating scatters ----------------------------------------


@register_flops(aten.nll_loss_forward, aten.nll_loss2d_forward)
def nll_loss_flops(a: ShapeArgs, out: Any) -> int:
    """nll_loss: accumulate −x[target] -> 1 per target element; with class weights,
    × w[target] and accumulate the total weight -> +2; mean reduction -> +1 divide."""
    per_target = 1 + (2 if a["weight"] is not None else 0)
    return per_target * numel(a["target"]) + (a["reduction"] == _MEAN_REDUCTION)


@register_flops(aten.nll_loss_backward, aten.nll_loss2d_backward)
def nll_loss_backward_flops(a: ShapeArgs, out: Any) -> int:
    """nll_loss backward: grad_input[target] = −grad (× w[target]) -> 1 per target element
    (+1 with class weights); mean reduction -> +1 divide by the total weight."""
    per_target = 1 + (a["weight"] is not None)
    return per_target * numel(a["target"]) + (a["reduction"] == _MEAN_REDUCTION)


@register_flops(aten.mse_loss)
def mse_loss_flops(a: ShapeArgs, out: Any) -> int:
    """mse_loss: subtract, square -> 2 per element; accumulate -> +1 unless reduction
    is none; mean -> +1 divide."""
    elements = numel(a["self"])
    reduction = a["reduction"]
    return (2 + (reduction != 0)) * elements + (reduction == _MEAN_REDUCTION)


@register_flops(aten.mse_loss_backward)
def mse_loss_backward_flops(a: ShapeArgs, out: Any) -> int:
    """mse_loss_backward: norm·(x − y)·grad, norm = 2 or 2/N -> 3 per element."""
    return 3 * numel(a["self"])


@register_flops(aten.smooth_l1_loss)
def smooth_l1_loss_flops(a: ShapeArgs, out: Any) -> int:
    """smooth_l1_loss: d = x − y, |d|, compare with beta, then 0.5·d²/beta -> subtract,
    abs, compare, square, halve, divide = 6 per element; accumulate +1 unless reduction
    is none; mean +1 divide."""
    elements = numel(a["self"])
    reduction = a["reduction"]
    return (6 + (reduction != 0)) * elements + (reduction == _MEAN_REDUCTION)


@register_flops(aten.smooth_l1_loss_backward)
def smooth_l1_loss_backward_flops(a: ShapeArgs, out: Any) -> int:
    """smooth_l1_loss backward: d = x − y, compare, d/beta or sign(d), × grad = 4 per
    element; mean divides every element by N -> +1."""
    return (4 + (a["reduction"] == _MEAN_REDUCTION)) * numel(a["self"])


@register_flops(aten.binary_cross_entropy_with_logits)
def bce_with_logits_flops(a: ShapeArgs, out: Any) -> int:
    """binary_cross_entropy_with_logits: (1 − y)·x + log(1 + exp(−x)) -> 1 − y, ·x, −x,
    exp, 1 +, log, + = 7 per element; × weight +1; pos_weight scales the log term by
    (pw − 1)·y + 1 -> +4; accumulate +1 unless reduction is none; mean +1 divide. Its
    backward is no op of its own: autograd runs it as elementwise ops."""
    elements = numel(a["self"])
    reduction = a["reduction"]
    per_element = (
        7 + (a["weight"] is not None) + 4 * (a["pos_weight"] is not None) + (reduction != 0)
    )
    return per_element * elements + (reduction == _MEAN_REDUCTION)


@register_flops(aten.embedding_dense_backward)
def embedding_backward_flops(a: ShapeArgs, out: Any) -> int:
    """embedding_dense_backward: accumulate each gradient row into its weight row -> 1 per
    grad_output element (+1 scaling by the inverse frequency with scale_grad_by_freq)."""
    return (1 + bool(a["scale_grad_by_freq"])) * numel(a["grad_output"])


@register_flops(*aten_family("index_add"), *aten_family("scatter_add"))
def scatter_add_flops(a: ShapeArgs, out: Any) -> int:
    """index_add / scatter_add: 1 add per source element (+1 when index_add's alpha ≠ 1)."""
    source = a["source"] if "source" in a else a["src"]
    return (1 if a.get("alpha", 1) == 1 else 2) * numel(source)


@register_flops(*aten_family("index_put"), aten._index_put_impl_)
def index_put_flops(a: ShapeArgs, out: Any) -> int:
    """index_put: 1 add per value element when accumulating, else 0 (a pure write)."""
    return numel(a["values"]) if a.get("accumulate") else 0
