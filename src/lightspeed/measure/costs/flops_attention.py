"""FLOPs of the matmul-class ops torch.utils.flop_counter misses (torch 2.13).

Attention convention (the same as torch's counter, so the two agree where both count):
only the two matmuls are counted, in full, whatever the mask —

    forward  = 2·R·Lk·Dqk (QKᵀ) + 2·R·Lk·Dv (P·V)            = 4·B·H·Lq·Lk·D when Dqk = Dv
    backward = 2·R·Lk·(Dqk + Dv + Dv + Dqk + Dqk)            = 10·B·H·Lq·Lk·D (2.5 × forward)
               (recompute QKᵀ, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q)

where R = B·Hq·Lq is the number of query rows (grouped-query attention counts the
query heads). The softmax, scale and dropout are not counted. A causal mask is *not*
discounted: a causal kernel skips about half of the score matrix, and
`attention_causal` tells a caller when to show that halved figure beside the full one.

Also here: `mv`, `addmv`, `dot`, `vdot`, `_addmm_activation` (its bias and activation
epilogue are not counted, as torch does not count `addmm`'s bias) and the fused
multi-head-attention fast paths (projections + attention).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch
from torch._ops import OpOverload

from lightspeed.measure.costs.flop_registry import ShapeArgs, aten, numel, register_flops
from lightspeed.workload.torch_internals import bind_arguments


def attention_forward_flops(query: torch.Size, key_length: int, qk_dim: int, v_dim: int) -> int:
    """FLOPs of QKᵀ and P·V: 2·R·Lk·(Dqk + Dv), R = query rows = numel(query) / Dqk."""
    # numel / head dim is B·H·Lq whatever the layout ([B, H, L, D], [B, L, H, D], packed).
    rows = numel(query) // qk_dim
    return 2 * rows * key_length * (qk_dim + v_dim)


def attention_backward_flops(query: torch.Size, key_length: int, qk_dim: int, v_dim: int) -> int:
    """FLOPs of the five backward matmuls: 2·R·Lk·(3·Dqk + 2·Dv)."""
    rows = numel(query) // qk_dim
    return 2 * rows * key_length * (3 * qk_dim + 2 * v_dim)


def _bhld(a: ShapeArgs) -> tuple[torch.Size, int, int, int]:
    """(query size, Lk, Dqk, Dv) for tensors laid out [..., H, L, D]."""
    query, key, value = a["query"], a["key"], a["value"]
    return query, key[-2], query[-1], value[-1]


def _varlen_or_bhld(a: ShapeArgs) -> tuple[torch.Size, int, int, int]:
    """Like `_bhld`, but packed variable-length inputs ([total_tokens, H, D] with
    cumulative offsets) count every sequence at the longest key length `max_k`: the
    offsets' values are on the device and reading them would synchronise."""
    query = a["query"]
    if a.get("cum_seq_k") is not None and len(query) == 3:
        return query, int(a["max_k"]), query[-1], a["value"][-1]
    return _bhld(a)


def _flash_layout(a: ShapeArgs) -> tuple[torch.Size, int, int, int]:
    """(query size, Lk, Dqk, Dv) for the flash kernels' [B, L, H, D] or packed [T, H, D]."""
    query, key, value = a["query"], a["key"], a["value"]
    key_length = int(a["max_k"]) if len(query) == 3 else key[-3]
    return query, key_length, query[-1], value[-1]


# --- scaled dot-product attention variants torch's counter misses -------------------


@register_flops(
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_fused_attention_overrideable,
    aten._scaled_dot_product_attention_math,
    aten._scaled_dot_product_attention_math_for_mps,
    aten._triton_scaled_dot_attention,
    matmul=True,
)
def sdpa_forward(a: ShapeArgs, out: Any) -> int:
    """Attention forward, [B, H, L, D] inputs: 4·B·H·Lq·Lk·D (no causal discount)."""
    if "q" in a:  # _triton_scaled_dot_attention names its inputs q, k, v
        a = {"query": a["q"], "key": a["k"], "value": a["v"]}
    return attention_forward_flops(*_bhld(a))


@register_flops(aten._cudnn_attention_forward, matmul=True)
def cudnn_attention_forward(a: ShapeArgs, out: Any) -> int:
    """cuDNN attention forward, dense [B, H, L, D] or packed variable-length inputs."""
    return attention_forward_flops(*_varlen_or_bhld(a))


@register_flops(aten._flash_attention_forward_no_dropout_inplace, matmul=True)
def flash_forward_inplace(a: ShapeArgs, out: Any) -> int:
    """Flash attention forward writing into `out`, [B, L, H, D] or packed inputs."""
    return attention_forward_flops(*_flash_layout(a))


@register_flops(
    aten._scaled_dot_product_flash_attention_for_cpu_backward,
    aten._scaled_dot_product_fused_attention_overrideable_backward,
    matmul=True,
)
def sdpa_backward(a: ShapeArgs, out: Any) -> int:
    """Attention backward, [B, H, L, D] inputs: 10·B·H·Lq·Lk·D (no causal discount)."""
    return attention_backward_flops(*_bhld(a))


@register_flops(aten._cudnn_attention_backward, matmul=True)
def cudnn_attention_backward(a: ShapeArgs, out: Any) -> int:
    """cuDNN attention backward, dense or packed variable-length inputs."""
    return attention_backward_flops(*_varlen_or_bhld(a))


@register_flops(aten._native_multi_head_attention, aten._triton_multi_head_attention, matmul=True)
def native_multi_head_attention(a: ShapeArgs, out: Any) -> int:
    """nn.MultiheadAttention's fused inference path, inputs [B, L, E]:
    Q, K, V and output projections (2·L·E·E each) plus attention with E = H·D."""
    query, key = a["query"], a["key"]
    batch, q_len, embed = query[0], query[1], query[2]
    k_len = key[1]
    projections = 2 * batch * embed * embed * (q_len + 2 * k_len + q_len)
    return projections + attention_forward_flops(query, k_len, embed, embed)


# --- small matmuls -----------------------------------------------------------------


@register_flops(aten.mv, aten.addmv, matmul=True)
def mv_flops(a: ShapeArgs, out: Any) -> int:
    """Matrix [M, N] × vector [N]: 2·M·N (addmv's bias add not counted)."""
    return 2 * numel(a["mat"] if "mat" in a else a["self"])


@register_flops(aten.dot, aten.vdot, matmul=True)
def dot_flops(a: ShapeArgs, out: Any) -> int:
    """Inner product of two [N] vectors: 2·N."""
    return 2 * numel(a["self"])


@register_flops(aten._addmm_activation, matmul=True)
def addmm_activation_flops(a: ShapeArgs, out: Any) -> int:
    """[M, K] × [K, N] with a fused bias + ReLU/GELU epilogue: 2·M·N·K (epilogue not counted)."""
    m, k = a["mat1"]
    n = a["mat2"][1]
    return 2 * m * n * k


@functools.cache  # asked for every op of a step; the answer depends on the op alone
def _has_mask_argument(func: OpOverload) -> bool:
    return any(a.name in ("is_causal", "custom_mask_type") for a in func._schema.arguments)


def attention_causal(func: OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether an attention op call applies a causal mask.

    Its OpCost still counts the full score matrix; a caller can show the causal figure
    (about half of it) beside the full one.

    Reads `is_causal`, or the memory-efficient kernels' `custom_mask_type` (1 = causal
    from the top left, 2 = from the bottom right). False for any other op.
    """
    if not _has_mask_argument(func):
        return False
    bound = bind_arguments(func, args, kwargs)
    if "is_causal" in bound:
        return bool(bound["is_causal"])
    return bound.get("custom_mask_type") in (1, 2)
