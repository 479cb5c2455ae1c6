"""FLOPs of recurrent layers (RNN, LSTM, GRU): the fused layer kernels and the fused cells.

What torch 2.13 dispatches, as a TorchDispatchMode sees it:

- CPU: nn.LSTM without projections runs `mkldnn_rnn_layer` once per layer and direction,
  and `mkldnn_rnn_layer_backward`. nn.RNN, nn.GRU, nn.LSTM with `proj_size`, packed
  sequences and the cells (nn.RNNCell, nn.LSTMCell, nn.GRUCell) decompose into `addmm` /
  `mm` (torch's counter counts them) and elementwise ops (`flops_pointwise`).
- CUDA with cuDNN: `_cudnn_rnn` and `_cudnn_rnn_backward` run the whole stack; ROCm's
  `miopen_rnn` and Apple's `_lstm_mps` are alike.
- CUDA cells, and the layers when cuDNN is off: `mm` for the gate matmuls, then
  `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` for the gate math; backward
  `_thnn_fused_lstm_cell_backward_impl` / `_thnn_fused_gru_cell_backward`.

Layer kernels are matmul-class (2 FLOPs per MAC). At every token (time step × sequence),
in every layer and direction, the input is multiplied by W_ih and the previous hidden
state by W_hh (and with projections the new hidden state by W_hr):

    forward  = 2 · tokens · Σ numel(W) over the weight matrices of all layers and directions
    backward = 2 × forward  (gradients of inputs and states, and gradients of weights)

Their bias adds and gate nonlinearities count 0. That is how torch.utils.flop_counter
counts the same network unrolled into nn.LSTMCell / nn.GRUCell / nn.RNNCell steps (it
counts addmm's product, not its bias, and no elementwise op), so a fused layer counts
exactly what torch counts for its unrolled twin; `flops_attention` leaves the softmax
out of fused attention the same way. What is left out, the gate math, is under
lightspeed's per-element rules 22 (LSTM), 16 (GRU) and 2 (RNN) FLOPs per hidden unit and
step, against 8·(I + H), 6·(I + H) and 2·(I + H) for the matmuls: below 1 % once the
input and hidden sizes add up to more than 275. (The CPU's decomposed layers do count
it, through their elementwise ops.)

The kernels' backward computes the gradients of the first layer's input and of the
initial states even where autograd does not need them (`mkldnn_rnn_layer_backward`
returns them, cuDNN's backward-data pass always runs); they are counted. cuDNN and
MIOpen skip the weight-gradient pass when `output_mask[3]` is false: 1 × forward then.

Fused cells only do the gate math, counted per hidden unit (element of the cell or
hidden state) by lightspeed's per-element rules (sigmoid 4, tanh 1, + − × 1):

    LSTM forward   22: 4 gate adds (input + hidden part), 3 sigmoids 12, tanh(g) 1,
                       c' = f·c + i·g 3, h' = o·tanh(c') 2
    LSTM backward  23: tanh(c') 1, dh·tanh(c') 1, dc = dh·o·(1 − tanh²(c')) + dc' 5,
                       dc·g, dc·c, dc·i 3, dc·f 1, the four activation derivatives 3 each
                   +4 with bias: the bias gradient sums the 4 gate gradients over the batch
    GRU forward    16: 2 gate adds, 2 sigmoids 8, n = tanh(i_n + r·h_n) 3, h' = n + z·(h − n) 3
    GRU backward   16: dz 5, dh 1, dn 5, dh_n 1, dr 4
                   +6 with bias: both bias gradients, 3 gates each, summed over the batch

The forward's bias adds count 0 here too: they belong to the gate matmuls, as addmm's
bias add does, so a fused cell's forward counts what lightspeed counts for the same cell
decomposed on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch

from lightspeed.measure.costs.flop_registry import (
    ShapeArgs,
    aten,
    numel,
    register_flops,
    shapes,
    zero_flops,
)

# Gate math per hidden unit of the fused cells (derived in the module docstring).
LSTM_CELL_FORWARD_FLOPS = 22
LSTM_CELL_BACKWARD_FLOPS = 23
LSTM_CELL_BIAS_GRAD_FLOPS = 4
GRU_CELL_FORWARD_FLOPS = 16
GRU_CELL_BACKWARD_FLOPS = 16
GRU_CELL_BIAS_GRAD_FLOPS = 6


def _tokens(input_size: torch.Size) -> int:
    """Rows a layer runs: T·B of [T, B, I] or [B, T, I], sum(batch_sizes) when packed."""
    return numel(input_size[:-1])


def _matrix_elements(weights: Any) -> int:
    """Elements of the weight matrices in a flat weight list (biases are 1-D)."""
    return sum(numel(size) for size in shapes(weights) if len(size) == 2)


# --- whole layers -------------------------------------------------------------------


@register_flops(aten.mkldnn_rnn_layer, matmul=True)
def mkldnn_rnn_layer_flops(a: ShapeArgs, out: Any) -> int:
    """One layer and direction on the CPU (oneDNN): 2 · tokens · (numel W_ih + numel W_hh)."""
    # weight0, weight1 are W_ih, W_hh; without biases weight2, weight3 repeat them.
    return 2 * _tokens(a["input"]) * (numel(a["weight0"]) + numel(a["weight1"]))


@register_flops(aten.mkldnn_rnn_layer_backward, matmul=True)
def mkldnn_rnn_layer_backward_flops(a: ShapeArgs, out: Any) -> int:
    """Its backward, input and weight gradients: 4 · tokens · (numel W_ih + numel W_hh)."""
    return 4 * _tokens(a["input"]) * (numel(a["weight1"]) + numel(a["weight2"]))


@register_flops(aten._cudnn_rnn, aten.miopen_rnn, aten._lstm_mps, matmul=True)
def rnn_stack_flops(a: ShapeArgs, out: Any) -> int:
    """All layers and directions: 2 · tokens · Σ numel of the weight matrices."""
    weights = a["weight"] if "weight" in a else a["params"]
    return 2 * _tokens(a["input"]) * _matrix_elements(weights)


@register_flops(aten._cudnn_rnn_backward, aten.miopen_rnn_backward, matmul=True)
def cudnn_rnn_backward_flops(a: ShapeArgs, out: Any) -> int:
    """The data-gradient pass, 2 · tokens · Σ numel(W), plus as much again for the weight
    gradients when `output_mask[3]` asks for them; 0 when no gradient flows in."""
    if all(a[name] is None for name in ("grad_output", "grad_hy", "grad_cy")):
        return 0  # the kernel returns undefined gradients without running
    passes = 2 if a["output_mask"][3] else 1
    return passes * 2 * _tokens(a["input"]) * _matrix_elements(a["weight"])


@register_flops(aten.lstm_mps_backward, matmul=True)
def lstm_mps_backward_flops(a: ShapeArgs, out: Any) -> int:
    """MPS LSTM backward, data and weight gradients: 4 · tokens · Σ numel(W)."""
    return 4 * _tokens(a["input"]) * _matrix_elements(a["params"])


# --- fused cells: the gate math after the gate matmuls ---------------------------------


@register_flops(aten._thnn_fused_lstm_cell)
def fused_lstm_cell_flops(a: ShapeArgs, out: Any) -> int:
    """LSTM gate math: 22 per hidden unit (cx [B, H])."""
    return LSTM_CELL_FORWARD_FLOPS * numel(a["cx"])


@register_flops(aten._thnn_fused_lstm_cell_backward_impl)
def fused_lstm_cell_backward_flops(a: ShapeArgs, out: Any) -> int:
    """LSTM gate gradients: 23 per hidden unit, 27 with the bias gradient; 0 when no
    gradient flows in."""
    if a["grad_hy"] is None and a["grad_cy"] is None:
        return 0
    per_unit = LSTM_CELL_BACKWARD_FLOPS + (LSTM_CELL_BIAS_GRAD_FLOPS if a["has_bias"] else 0)
    return per_unit * numel(a["cx"])


@register_flops(aten._thnn_fused_gru_cell)
def fused_gru_cell_flops(a: ShapeArgs, out: Any) -> int:
    """GRU gate math: 16 per hidden unit (hx [B, H])."""
    return GRU_CELL_FORWARD_FLOPS * numel(a["hx"])


@register_flops(aten._thnn_fused_gru_cell_backward)
def fused_gru_cell_backward_flops(a: ShapeArgs, out: Any) -> int:
    """GRU gate gradients: 16 per hidden unit, 22 with the bias gradients."""
    per_unit = GRU_CELL_BACKWARD_FLOPS + (GRU_CELL_BIAS_GRAD_FLOPS if a["has_bias"] else 0)
    return per_unit * numel(a["grad_hy"])


# Data only: cuDNN copies the weights into one flat buffer and draws its dropout state;
# packing gathers the time steps of padded sequences into one [sum(lengths), I] tensor.
register_flops(
    aten._cudnn_rnn_flatten_weight, aten._cudnn_init_dropout_state, aten._pack_padded_sequence
)(zero_flops)
