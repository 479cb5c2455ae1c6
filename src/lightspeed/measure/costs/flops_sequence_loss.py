"""FLOPs of the CTC loss, the sequence loss of speech recognisers (Deep Speech 2).

Counting rule (as in `flops_pointwise`): one FLOP per arithmetic operation, comparison or
special function (exp, log). Index arithmetic and branches are not counted.

CTC (Graves et al. 2006, "Connectionist Temporal Classification", section 4.1) runs the
forward-backward recursion over a lattice of (time step, extended label) cells per
utterance: T_b time steps by S_b = 2·L_b + 1 labels, the L_b target characters with a
blank before, between and after them. torch's kernel (aten/src/ATen/native/LossCTC.cpp;
the CUDA kernel follows the same equations) works in log space. The recursion fills
rows t = 1 … T_b − 1 (row 0 is copied from the inputs): cells_b = (T_b − 1)·S_b cells.

    alpha, per cell   13: the largest of the 3 predecessors 2 compares, 3 subtracts,
                          3 exps, 2 adds, 1 log, + the largest, + the cell's log-prob
    loss, per utterance 9: log-add of the last two cells (max 1, 2 subtracts, 2 exps,
                          add, log, add) and the negation
    beta, per cell    13: as alpha, run backwards in time
    collect, per cell  9: alpha + beta 1, log-added into its character's sum at that
                          time step (max, 2 subtracts, 2 exps, add, log, add) 8
    gradient, per (time step, character) 6: exp(log-prob), + loss, − log-prob, exp,
                          subtract, × the incoming gradient

    _ctc_loss          = 13 · Σ cells_b + 9 · batch
    _ctc_loss_backward = 22 · Σ cells_b + 6 · Σ T_b · characters

The `int[]` overloads receive the lengths, so each utterance counts its own T_b and
L_b. The `.Tensor` overloads receive lengths as tensors, whose values a formula does not
see: they count the padded lattice, every utterance at the longest input and target
(an upper bound, exact when all lengths are equal). The first row's copies and the two
cells that start the beta recursion are not counted.

cuDNN's and MIOpen's CTC (`_cudnn_ctc_loss`, `miopen_ctc_loss`: 1-D concatenated
targets, every input T steps long) return the loss and its gradient from one call: they
count both passes above, 35 per cell + 9 per utterance + 6 per (time step, character).
Their autograd backward only scales that gradient (elementwise ops). The query
`_use_cudnn_ctc_loss`, which `F.ctc_loss` asks on CUDA, computes nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from lightspeed.measure.costs.flop_registry import (
    ShapeArgs,
    aten,
    numel,
    register_flops,
    zero_flops,
)

CTC_ALPHA_FLOPS_PER_CELL = 13
CTC_LOSS_FLOPS_PER_UTTERANCE = 9
CTC_BACKWARD_FLOPS_PER_CELL = 22  # beta 13 + collecting alpha·beta 9
CTC_GRADIENT_FLOPS_PER_ELEMENT = 6


def _lattice(a: ShapeArgs, padded_labels: int) -> tuple[int, int]:
    """(cells the recursion fills, Σ T_b): Σ (T_b − 1)·S_b over the utterances.

    From the `int[]` lengths when the op has them; from lengths tensors (which reach a
    formula as their torch.Size) it assumes every utterance T steps long, log_probs
    [T, batch, characters], with `padded_labels` = Σ S_b.
    """
    input_lengths, target_lengths = a["input_lengths"], a["target_lengths"]
    if isinstance(input_lengths, torch.Size) or isinstance(target_lengths, torch.Size):
        steps, batch, _ = a["log_probs"]
        return max(steps - 1, 0) * padded_labels, steps * batch
    labels = [2 * length + 1 for length in target_lengths]
    cells = sum(max(t - 1, 0) * s for t, s in zip(input_lengths, labels, strict=True))
    return cells, sum(input_lengths)


@register_flops(aten._ctc_loss)
def ctc_loss_flops(a: ShapeArgs, out: Any) -> int:
    """CTC forward (alpha recursion and loss): 13 per lattice cell + 9 per utterance."""
    batch, _, labels = out[1]  # log_alpha [batch, T, 2 · L_max + 1]
    cells, _ = _lattice(a, batch * labels)
    return CTC_ALPHA_FLOPS_PER_CELL * cells + CTC_LOSS_FLOPS_PER_UTTERANCE * batch


@register_flops(aten._ctc_loss_backward)
def ctc_loss_backward_flops(a: ShapeArgs, out: Any) -> int:
    """CTC backward (beta recursion, alpha·beta collection, gradient): 22 per lattice
    cell + 6 per (time step, character) of every utterance."""
    batch, _, labels = a["log_alpha"]
    cells, steps = _lattice(a, batch * labels)
    characters = a["log_probs"][-1]
    return CTC_BACKWARD_FLOPS_PER_CELL * cells + CTC_GRADIENT_FLOPS_PER_ELEMENT * steps * characters


@register_flops(aten._cudnn_ctc_loss, aten.miopen_ctc_loss)
def fused_ctc_loss_flops(a: ShapeArgs, out: Any) -> int:
    """cuDNN / MIOpen CTC, loss and gradient in one call: 35 per lattice cell + 9 per
    utterance + 6 per (time step, character)."""
    _, batch, characters = a["log_probs"]
    targets = a["targets"]  # concatenated [Σ L_b], or padded [batch, L_max]
    padded_labels = (
        2 * numel(targets) + batch if len(targets) == 1 else batch * (2 * targets[1] + 1)
    )
    cells, steps = _lattice(a, padded_labels)
    per_cell = CTC_ALPHA_FLOPS_PER_CELL + CTC_BACKWARD_FLOPS_PER_CELL
    gradient = CTC_GRADIENT_FLOPS_PER_ELEMENT * steps * characters
    return per_cell * cells + CTC_LOSS_FLOPS_PER_UTTERANCE * batch + gradient


# A query answering whether cuDNN can run the loss: no arithmetic.
register_flops(aten._use_cudnn_ctc_loss)(zero_flops)
