"""CTC loss: exact FLOP counts of its kernels, recorded on the CPU or costed from the
arguments their schemas take (cuDNN's and MIOpen's cannot run here).

Conventions are flops_sequence_loss's: per lattice cell 13 forward, 22 backward, 35 for
the fused kernels; 9 per utterance; 6 per (time step, character) of the gradient.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch._ops import OpOverload

from cost_recording import CostRecorder
from lightspeed.measure.costs.op_cost import OpCost, known_flops, op_cost

aten = torch.ops.aten

# Two utterances: 6 and 4 time steps of 5 symbols (blank 0), transcripts of 3 and 2.
STEPS, BATCH, SYMBOLS = 6, 2, 5
INPUT_LENGTHS, TARGET_LENGTHS = [6, 4], [3, 2]
# Lattice cells the recursion fills, Σ (T_b − 1)·(2·L_b + 1): 5·7 + 3·5 = 50.
CELLS = 50


def _ctc(recorder: CostRecorder) -> list[tuple[str, int]]:
    """(overload, FLOPs) of every CTC kernel call, in call order."""
    return [
        (str(call.func), call.cost.flops)
        for call in recorder.calls
        if call.func.overloadpacket in (aten._ctc_loss, aten._ctc_loss_backward)
    ]


def _log_probs() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(STEPS, BATCH, SYMBOLS).log_softmax(dim=2).requires_grad_()


def _targets() -> torch.Tensor:
    return torch.tensor([[1, 2, 3], [4, 1, 0]])  # padded [batch, L_max]


def test_ctc_with_int_lengths_counts_each_utterance_lattice() -> None:
    log_probs = _log_probs()
    recorder = CostRecorder()
    with recorder:
        loss = F.ctc_loss(log_probs, _targets(), INPUT_LENGTHS, TARGET_LENGTHS)
        loss.backward()
    assert _ctc(recorder) == [
        # alpha 13 per cell + 9 per utterance: 13·50 + 9·2 = 668
        ("aten._ctc_loss.default", 13 * CELLS + 9 * BATCH),
        # beta and collection 22 per cell + gradient 6 per (step, symbol) of the
        # utterances' own steps: 22·50 + 6·(6 + 4)·5 = 1,400
        ("aten._ctc_loss_backward.default", 22 * CELLS + 6 * (6 + 4) * SYMBOLS),
    ]
    assert recorder.calls[0].cost.macs is None  # not matmul-class


def test_ctc_with_length_tensors_counts_the_padded_lattice() -> None:
    log_probs = _log_probs()
    recorder = CostRecorder()
    with recorder:
        lengths = torch.tensor(INPUT_LENGTHS), torch.tensor(TARGET_LENGTHS)
        F.ctc_loss(log_probs, _targets(), *lengths).backward()
    # Both utterances at 6 steps and 7 labels: (6 − 1)·7·2 = 70 cells; 6·2 gradient rows.
    assert _ctc(recorder) == [
        ("aten._ctc_loss.Tensor", 13 * 70 + 9 * BATCH),  # 928
        ("aten._ctc_loss_backward.Tensor", 22 * 70 + 6 * 12 * SYMBOLS),  # 1,900
    ]


def test_equal_lengths_count_the_same_through_either_overload() -> None:
    lengths = [STEPS] * BATCH, [3] * BATCH
    counts = []
    for as_tensor in (False, True):
        recorder = CostRecorder()
        with recorder:
            args = [torch.tensor(x) for x in lengths] if as_tensor else lengths
            F.ctc_loss(_log_probs(), _targets(), *args).backward()
        counts.append([flops for _, flops in _ctc(recorder)])
    # 5·7·2 = 70 cells: forward 13·70 + 18 = 928, backward 22·70 + 6·12·5 = 1,900
    assert counts == [[928, 1_900], [928, 1_900]]


def _fused_cost(func: OpOverload, *lengths: Any) -> OpCost:
    """Cost of a cuDNN-style call: concatenated targets, loss and gradient returned."""
    log_probs = torch.zeros(STEPS, BATCH, SYMBOLS)
    targets = torch.tensor([1, 2, 3, 4, 1])  # Σ L_b = 3 + 2
    args = (log_probs, targets, *lengths, 0, True, False)  # blank, deterministic, zero_inf
    return op_cost(func, args, {}, (torch.zeros(BATCH), torch.zeros_like(log_probs)))


def test_cudnn_and_miopen_ctc_count_both_passes() -> None:
    # cuDNN needs every input T steps long: (6 − 1)·(7 + 5) = 60 cells;
    # 35 per cell + 9 per utterance + 6 per (step, symbol): 2,100 + 18 + 6·12·5 = 2,478
    expected = 35 * 60 + 9 * BATCH + 6 * STEPS * BATCH * SYMBOLS
    int_lengths = ([STEPS] * BATCH, TARGET_LENGTHS)
    tensor_lengths = (torch.tensor([STEPS] * BATCH), torch.tensor(TARGET_LENGTHS))
    costs = [
        _fused_cost(aten._cudnn_ctc_loss.default, *int_lengths),
        _fused_cost(aten._cudnn_ctc_loss.Tensor, *tensor_lengths),
        _fused_cost(aten.miopen_ctc_loss.default, *int_lengths),
        _fused_cost(aten.miopen_ctc_loss.Tensor, *tensor_lengths),
    ]
    assert [cost.flops for cost in costs] == [expected] * 4 == [2_478] * 4


def test_the_cudnn_query_is_a_known_zero() -> None:
    func = aten._use_cudnn_ctc_loss.default
    assert known_flops(func)
    args = (torch.zeros(STEPS, BATCH, SYMBOLS), _targets(), INPUT_LENGTHS, TARGET_LENGTHS, 0)
    assert op_cost(func, args, {}, False).flops == 0
