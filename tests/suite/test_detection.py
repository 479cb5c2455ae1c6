"""SSDLite: exact size against torchvision, default boxes, IoU matching, box encoding and
hard negative mining on hand-worked examples, and FLOP formulas for every op of the tiny
training step.
"""

from __future__ import annotations

import math

import torch

from lightspeed import suite
from lightspeed.measure.capture import capture_step
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.suite.detection import box_iou, default_boxes, encode, hard_negatives, match


def test_parameter_count_matches_torchvision() -> None:
    # torchvision SSDLite320_MobileNet_V3_Large_Weights.COCO_V1.meta["num_params"]
    with torch.device("meta"):
        model = suite.get("ssdlite").model()
    assert sum(p.numel() for p in model.parameters()) == 3_440_060


def test_full_size_model_predicts_for_every_default_box() -> None:
    with torch.device("meta"):
        model = suite.get("ssdlite").model()
    offsets, logits, anchors = model(torch.empty(2, 3, 320, 320, device="meta"))
    # 6 boxes per cell on 20x20, 10x10, 5x5, 3x3, 2x2, 1x1: 6 * 539 = 3234
    assert offsets.shape == (2, 3234, 4)
    assert logits.shape == (2, 3234, 91)
    assert anchors.shape == (3234, 4)


def test_default_boxes_of_one_cell() -> None:
    # Two maps: scales 0.2 and 0.95, then 1. The 1x1 map's cell is centred at 0.5.
    boxes = default_boxes([(1, 1), (1, 1)], torch.device("cpu"))
    s, s_prime = 0.2, math.sqrt(0.2 * 0.95)
    r2, r3 = math.sqrt(2), math.sqrt(3)
    sizes = [(s, s), (s_prime, s_prime), (s * r2, s / r2), (s / r2, s * r2)]
    sizes += [(s * r3, s / r3), (s / r3, s * r3)]
    expected = torch.tensor([(0.5, 0.5, w, h) for w, h in sizes])
    torch.testing.assert_close(boxes[:6], expected)
    # The second map's scale 0.95 times sqrt(2) or sqrt(3) is clipped to 1.
    assert boxes[6:, 2:].max() == 1.0


# Anchors (cx, cy, w, h) and their corners:
#   a0 (0.25, 0.25, 0.5, 0.5) -> [0, 0, 0.5, 0.5]
#   a1 (0.75, 0.75, 0.5, 0.5) -> [0.5, 0.5, 1, 1]
#   a2 (0.5, 0.5, 1, 1)       -> [0, 0, 1, 1]
#   a3 (0.3, 0.3, 0.4, 0.4)   -> [0.1, 0.1, 0.5, 0.5]
ANCHORS = torch.tensor(
    [[0.25, 0.25, 0.5, 0.5], [0.75, 0.75, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0], [0.3, 0.3, 0.4, 0.4]]
)
CORNERS = torch.tensor(
    [[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [0.1, 0.1, 0.5, 0.5]]
)
# g0 = [0, 0, 0.5, 0.5] (area 0.25), g1 = [0.5, 0.5, 0.75, 0.75] (area 0.0625).
TRUTH = torch.tensor([[[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 0.75, 0.75]]])


def test_box_iou_by_hand() -> None:
    expected = torch.tensor(
        [
            # g0: a0 identical; a1 touches only; a2 0.25 / 1; a3 inside g0: 0.16 / 0.25
            [1.0, 0.0, 0.25, 0.64],
            # g1: a1 holds it: 0.0625 / 0.25; a2 0.0625 / 1; a0 and a3 touch or miss it
            [0.0, 0.25, 0.0625, 0.0],
        ]
    )
    torch.testing.assert_close(box_iou(TRUTH, CORNERS)[0], expected)


def test_match_takes_iou_above_half_and_each_box_s_best_anchor() -> None:
    positive, index = match(ANCHORS, TRUTH)
    # a0 -> g0 (IoU 1), a3 -> g0 (0.64 >= 0.5); a1 -> g1 only as g1's best anchor
    # (0.25 < 0.5); a2's best IoU is 0.25 and it is nobody's best: negative.
    assert positive.tolist() == [[True, True, False, True]]
    assert index[positive].tolist() == [0, 1, 0]


def test_encode_by_hand() -> None:
    matched = TRUTH[0][torch.tensor([0, 1, 0, 0])]
    offsets = encode(ANCHORS, matched)
    expected = torch.tensor(
        [
            # a0 <- g0: same centre and size
            [0.0, 0.0, 0.0, 0.0],
            # a1 <- g1: centre 0.625: (0.625 - 0.75) / 0.5 / 0.1 = -2.5; log(0.25 / 0.5) / 0.2
            [-2.5, -2.5, math.log(0.5) / 0.2, math.log(0.5) / 0.2],
            # a2 <- g0: (0.25 - 0.5) / 1 / 0.1 = -2.5; log(0.5 / 1) / 0.2
            [-2.5, -2.5, math.log(0.5) / 0.2, math.log(0.5) / 0.2],
            # a3 <- g0: (0.25 - 0.3) / 0.4 / 0.1 = -1.25; log(0.5 / 0.4) / 0.2
            [-1.25, -1.25, math.log(1.25) / 0.2, math.log(1.25) / 0.2],
        ]
    )
    torch.testing.assert_close(offsets, expected)


def test_hard_negative_mining_keeps_three_negatives_per_positive() -> None:
    loss = torch.tensor(
        [
            [9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 0.0],
            [9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 0.0],
            [9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0, 0.0],
        ]
    )
    positive = torch.zeros(3, 10, dtype=torch.bool)
    positive[0, [0, 4]] = True  # 2 positives: the 6 highest of the others' losses
    positive[1, 9] = True  # 1 positive: 3 negatives
    positive[2, [0, 1, 2]] = True  # 3 positives: 9 wanted, only 7 negatives exist
    chosen = hard_negatives(loss, positive)
    # Image 0, negatives by loss: 8 (a2), 6 (a6), 5 (a8), 4 (a7), 3 (a5), 2 (a3), 1, 0.
    assert chosen[0].nonzero().flatten().tolist() == [2, 3, 5, 6, 7, 8]
    # Image 1: 9 (a0), 8 (a2), 7 (a4).
    assert chosen[1].nonzero().flatten().tolist() == [0, 2, 4]
    assert chosen[2].nonzero().flatten().tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert chosen.sum(1).tolist() == [6, 3, 7]


def test_tiny_training_step_has_a_flop_formula_for_every_op() -> None:
    ops = capture_step(prepare(suite.get("ssdlite-tiny"), StepSettings()))
    assert [op.name for op in ops if not op.flops_known] == []
