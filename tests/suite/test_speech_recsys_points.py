"""Deep Speech 2, NeuMF and PointNet: sizes against their sources, forward FLOPs against
analytic counts written out here, and tiny training steps whose every op has a count.

Full-size models run on the meta device. The analytic counts are per-layer MACs × 2
(for a GRU: 3 gates × (input + hidden) weights per step and direction); what is not
matmul-class follows the conventions of lightspeed's formula modules, cited per term.
"""

from __future__ import annotations

import pytest
import torch

from lightspeed import suite
from lightspeed.facts.records import OpRecord
from lightspeed.measure.capture import capture_forward, capture_step
from lightspeed.measure.costs.flops_rnn import GRU_CELL_FORWARD_FLOPS
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.suite.recommendation import NEGATIVES_PER_POSITIVE
from lightspeed.suite.speech import DeepSpeech2Config


def _on_meta(name: str) -> torch.nn.Module:
    with torch.device("meta"):
        return suite.get(name).model()


def _num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _forward_ops(name: str, batch_size: int) -> list[OpRecord]:
    """The ops of one forward pass of the full-size model (training mode) on meta."""
    workload = suite.get(name)
    batch = [t.to("meta") for t in workload.batch(batch_size)]
    inputs = batch[:-1]  # every tensor but the labels / transcripts
    return capture_forward(_on_meta(name), *inputs)


def _matmul_flops(ops: list[OpRecord]) -> int:
    return sum(op.flops for op in ops if op.macs is not None)


def _batch_norm_flops(elements: int, channels: int) -> int:
    """A training-mode batch norm layer (flops_reduction): (5 + weight + bias) per
    element, 4 per channel for the statistics, 3 per channel for each of the two running
    buffers; + 1 for its num_batches_tracked += 1."""
    return 7 * elements + (4 + 2 * 3) * channels + 1


# --- parameter counts -----------------------------------------------------------------


def test_deepspeech2_parameters() -> None:
    # conv1 32·41·11 + 32 = 14,464; conv2 32·32·21·11 + 32 = 236,576; their batch norms
    # 2·2·32 = 128. GRU layer 1 (input 32 channels · 21 bins = 672, 800 units), per
    # direction 3·800·(672 + 800) weights + 2·3·800 biases = 3,537,600; layers 2-5 per
    # direction 3·800·1,600 + 4,800 = 3,844,800, each with a batch norm of 2·800.
    # Output: batch norm 1,600 + 800·29 = 23,200 (no bias).
    gru = 2 * 3_537_600 + 4 * (2 * 3_844_800 + 1_600)
    expected = 14_464 + 236_576 + 128 + gru + 1_600 + 23_200
    assert _num_params(_on_meta("deepspeech2")) == expected == 38_115_968


def test_ncf_parameters() -> None:
    # MovieLens-20M, 138,493 users and 26,744 items: GMF tables 64 wide, MLP tables
    # 256 / 2 = 128 wide; MLP 256·256 + 256 + 256·128 + 128 + 128·64 + 64 = 106,944;
    # the prediction layer (64 + 64) + 1 = 129.
    tables = (138_493 + 26_744) * (64 + 128)  # 31,725,504
    expected = tables + 106_944 + 129
    assert _num_params(_on_meta("ncf")) == expected == 31_832_577


def test_ncf_tiny_is_the_papers_smallest_movielens_1m_model() -> None:
    # 6,040 users, 3,706 items; GMF 8 wide, MLP tables 16 wide; MLP 32·16 + 16 + 16·8 + 8
    # = 664; prediction (8 + 8) + 1 = 17.
    expected = (6_040 + 3_706) * (8 + 16) + 664 + 17
    assert _num_params(suite.get("ncf-tiny").model()) == expected == 234_585


def test_pointnet_parameters_match_the_paper() -> None:
    # A T-Net for k inputs: 1x1 convs k·64 + 64, 64·128 + 128, 128·1024 + 1024; FCs
    # 1024·512 + 512, 512·256 + 256, 256·k² + k²; batch norms 2·(64 + 128 + 1024 + 512
    # + 256) = 3,968.
    def tnet(k: int) -> int:
        return k * 64 + 64 + 8_320 + 132_096 + 524_800 + 131_328 + 257 * k * k + 3_968

    # Input T-Net (k=3) 803,081; feature T-Net (k=64) 1,857,344. Shared MLPs 3→64→64 and
    # 64→64→128→1024: 256 + 4,160 + 4,160 + 8,320 + 132,096 = 148,992, batch norms
    # 2·(64 + 64 + 64 + 128 + 1024) = 2,688. Classifier 524,800 + 131,328 + 256·40 + 40,
    # batch norms 2·(512 + 256) = 1,536.
    expected = tnet(3) + tnet(64) + 148_992 + 2_688 + 524_800 + 131_328 + 10_280 + 1_536
    params = _num_params(_on_meta("pointnet"))
    assert params == expected == 3_480_049
    # Qi et al. 2017, Table 6: "3.5M" parameters.
    assert params == pytest.approx(3.5e6, rel=0.01)


# --- forward FLOPs --------------------------------------------------------------------


def test_deepspeech2_forward_flops() -> None:
    config = DeepSpeech2Config()
    assert config.conv_output() == (21, 235)  # 161 bins → 61 → 21; 500 frames → 245 → 235
    ops = _forward_ops("deepspeech2", batch_size=2)
    # Per utterance, in MACs: conv1 32 channels · 61 bins · 245 steps · 41·11 = 215,686,240;
    # conv2 32 · 21 · 235 · 32·21·11 = 1,167,344,640; GRU 235 steps · 2 directions ·
    # 3·800 · (input + 800) with input 672 in layer 1 and 800 in layers 2-5:
    # 1,660,416,000 + 4 · 1,804,800,000; output 235 · 800 · 29 = 5,452,000.
    macs = 215_686_240 + 1_167_344_640 + 1_660_416_000 + 4 * 1_804_800_000 + 5_452_000
    assert macs == 10_268_098_880
    assert _matmul_flops(ops) == 2 * 2 * macs  # 2 FLOPs per MAC, 2 utterances

    # The rest, for the 2 utterances: conv batch norms over 2·32·61·245 = 956,480 and
    # 2·32·21·235 = 315,840 elements; sequence-wise batch norms over 235·2·800 = 376,000
    # (inputs of GRU layers 2-5 and the output layer); clipped ReLU 2 per element
    # (flops_pointwise's hardtanh); GRU gate math 16 per unit and step (flops_rnn's
    # GRU_CELL_FORWARD_FLOPS, which the CPU's decomposed GRU counts too) over
    # 2 utterances · 235 steps · 2 directions · 5 layers · 800 units = 3,760,000; the
    # directions' sum 1 per element summed, as many.
    batch_norms = (
        _batch_norm_flops(956_480, 32)
        + _batch_norm_flops(315_840, 32)
        + 5 * _batch_norm_flops(376_000, 800)
    )
    rest = batch_norms + 2 * (956_480 + 315_840) + (GRU_CELL_FORWARD_FLOPS + 1) * 3_760_000
    assert sum(op.flops for op in ops) == 2 * 2 * macs + rest == 41_160_967_047


def test_ncf_forward_flops() -> None:
    ops = _forward_ops("ncf", batch_size=2)
    # Per sample, MACs: MLP 256·256 + 256·128 + 128·64 = 106,496, prediction 128 · 1.
    macs = 106_496 + 128
    assert _matmul_flops(ops) == 2 * 2 * macs  # 426,496
    # Embedding lookups 0; GMF product 64 and ReLUs 256 + 128 + 64 per sample.
    assert sum(op.flops for op in ops) == 2 * (2 * macs + 64 + 448) == 427_520


def test_pointnet_forward_flops() -> None:
    ops = _forward_ops("pointnet", batch_size=2)
    points = 1_024
    # Per cloud, MACs: input T-Net convs (3·64 + 64·128 + 128·1024)·1024 points and FCs
    # 1024·512 + 512·256 + 256·9; the 3x3 transform 9·1024; shared MLP (3·64 + 64·64)
    # ·1024; feature T-Net convs (64·64 + 64·128 + 128·1024)·1024 and FCs 1024·512 +
    # 512·256 + 256·4096; the 64x64 transform 64·64·1024; shared MLP (64·64 + 64·128 +
    # 128·1024)·1024; classifier 1024·512 + 512·256 + 256·40.
    network = (
        139_456 * points
        + 657_664
        + 9 * points
        + 4_288 * points
        + 143_360 * points
        + 1_703_936
        + 4_096 * points
        + 143_360 * points
        + 665_600
    )
    assert network == 448_025_856
    # Qi et al. 2017, Table 6: 440M "FLOPs" per sample, a multiply-add counted once.
    assert network == pytest.approx(440e6, rel=0.02)
    penalty = 64 * 64 * 64  # A·Aᵀ of the 64x64 feature transform, for the regulariser
    assert _matmul_flops(ops) == 2 * 2 * (network + penalty)

    # The rest, for the 2 clouds: batch norm + ReLU after every layer but the last of
    # each T-Net and of the classifier: the convs' 3·(64 + 128 + 1024)·2,048 + (64 +
    # 64)·2,048 = 7,733,248 elements and the FCs' 3·(512 + 256)·2 = 4,608, over 3·1,216 +
    # 128 + 3·768 = 6,080 channels in 17 layers (7,737,856 elements in all); the 3
    # max-pools 1 per input element, 3·1024·2,048; ||I − A·Aᵀ||²: subtract, square, sum
    # 64·64·2 each + mean 2 + 1; dropout 2 per element after both hidden layers of the
    # classifier, (512 + 256)·2.
    elements, channels, layers = 7_733_248 + 4_608, 6_080, 17
    batch_norms = 7 * elements + (4 + 2 * 3) * channels + layers
    rest = batch_norms + elements + 3 * 1_024 * 2_048 + 3 * 8_192 + 3 + 2 * 1_536
    assert sum(op.flops for op in ops) == 2 * 2 * (network + penalty) + rest


# --- batches and tiny steps -----------------------------------------------------------


def test_ncf_batches_hold_one_positive_per_four_negatives() -> None:
    _, _, labels = suite.get("ncf-tiny").batch(250)
    assert labels[:5].tolist() == [1, 0, 0, 0, 0]
    assert labels.sum().item() == 250 / (1 + NEGATIVES_PER_POSITIVE) == 50


@pytest.mark.parametrize("name", ["ncf-tiny", "pointnet-tiny"])
def test_every_op_of_the_tiny_steps_has_a_flop_count(name: str) -> None:
    ops = capture_step(prepare(suite.get(name), StepSettings()))
    assert [op.name for op in ops if not op.flops_known] == []


def test_every_op_of_the_deepspeech2_tiny_step_has_a_flop_count() -> None:
    ops = capture_step(prepare(suite.get("deepspeech2-tiny"), StepSettings()))
    assert [op.name for op in ops if not op.flops_known] == []
    # 4 utterances of 35 steps and 15 characters: 4·34·(2·15 + 1) = 4,216 lattice cells;
    # forward 13 per cell + 9 per utterance, backward 22 per cell + 6 per (step, symbol).
    ctc = [op.flops for op in ops if op.name.startswith("aten::_ctc_loss")]
    assert ctc == [13 * 4_216 + 9 * 4, 22 * 4_216 + 6 * 4 * 35 * 29] == [54_844, 117_112]
