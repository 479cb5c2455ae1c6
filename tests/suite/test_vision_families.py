"""Inception-v3 and MobileNetV3-Large: exact sizes and forward MACs against the published
figures and against a per-layer count written out here, and FLOP formulas for every op
of their tiny training steps.

Full-size models are built on the meta device: shapes and op counts without allocating
or running anything.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cost_recording import CostRecorder
from lightspeed import suite
from lightspeed.facts.records import OpRecord
from lightspeed.measure.capture import capture_forward, capture_step
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.suite.inception import inception_loss

aten = torch.ops.aten


def _on_meta(name: str) -> nn.Module:
    with torch.device("meta"):
        return suite.get(name).model()


def _matmul_macs(ops: list[OpRecord]) -> int:
    """MACs of the matmul-class ops (convs, linears): what torchvision's GMACs count."""
    return sum(op.macs for op in ops if op.macs is not None)


def _conv_macs(cin: int, cout: int, kh: int, kw: int, side: int, groups: int = 1) -> int:
    """A kh x kw conv with a side x side output: one MAC per weight per output position."""
    return cin // groups * cout * kh * kw * side * side


# --- parameter counts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        # torchvision Inception_V3_Weights.IMAGENET1K_V1.meta["num_params"] (aux head included)
        ("inception-v3", 27_161_264),
        # torchvision MobileNet_V3_Large_Weights.IMAGENET1K_V1.meta["num_params"]
        ("mobilenetv3-large", 5_483_032),
    ],
)
def test_parameter_counts_match_torchvision(name: str, params: int) -> None:
    assert sum(p.numel() for p in _on_meta(name).parameters()) == params


# --- Inception-v3 forward MACs -----------------------------------------------------------


def _inception_35(cin: int, pool: int) -> int:
    # Figure 5 block on the 35x35 grid: branches 1x1; 1x1 -> 5x5; 1x1 -> 3x3 -> 3x3; pool 1x1.
    return (
        _conv_macs(cin, 64, 1, 1, 35)
        + _conv_macs(cin, 48, 1, 1, 35)
        + _conv_macs(48, 64, 5, 5, 35)
        + _conv_macs(cin, 64, 1, 1, 35)
        + _conv_macs(64, 96, 3, 3, 35)
        + _conv_macs(96, 96, 3, 3, 35)
        + _conv_macs(cin, pool, 1, 1, 35)
    )


def _inception_17(c7: int) -> int:
    # Figure 6 block on 17x17, input 768: 1x1; 1x1 -> 1x7 -> 7x1;
    # 1x1 -> 7x1 -> 1x7 -> 7x1 -> 1x7; pool 1x1. A 1x7 and a 7x1 cost the same.
    return (
        _conv_macs(768, 192, 1, 1, 17)
        + _conv_macs(768, c7, 1, 1, 17)
        + _conv_macs(c7, c7, 1, 7, 17)
        + _conv_macs(c7, 192, 7, 1, 17)
        + _conv_macs(768, c7, 1, 1, 17)
        + 3 * _conv_macs(c7, c7, 7, 1, 17)
        + _conv_macs(c7, 192, 1, 7, 17)
        + _conv_macs(768, 192, 1, 1, 17)
    )


def _inception_8(cin: int) -> int:
    # Figure 7 block on 8x8: 1x1 320; 1x1 384 -> (1x3, 3x1) 384 each;
    # 1x1 448 -> 3x3 384 -> (1x3, 3x1) 384 each; pool 1x1 192.
    return (
        _conv_macs(cin, 320, 1, 1, 8)
        + _conv_macs(cin, 384, 1, 1, 8)
        + 2 * _conv_macs(384, 384, 1, 3, 8)
        + _conv_macs(cin, 448, 1, 1, 8)
        + _conv_macs(448, 384, 3, 3, 8)
        + 2 * _conv_macs(384, 384, 1, 3, 8)
        + _conv_macs(cin, 192, 1, 1, 8)
    )


# Convs and the classifier of Inception-v3 on one 299x299 image, aux head excluded.
INCEPTION_V3_MACS = (
    # stem: 299 -> 149 -> 147 -> 147 -> (pool) 73 -> 73 -> 71
    _conv_macs(3, 32, 3, 3, 149)
    + _conv_macs(32, 32, 3, 3, 147)
    + _conv_macs(32, 64, 3, 3, 147)
    + _conv_macs(64, 80, 1, 1, 73)
    + _conv_macs(80, 192, 3, 3, 71)
    # three 35x35 blocks: 192 -> 256 -> 288 -> 288 channels
    + _inception_35(192, 32)
    + _inception_35(256, 64)
    + _inception_35(288, 64)
    # 35 -> 17 reduction: 3x3/2 384; 1x1 64 -> 3x3 96 -> 3x3/2 96
    + _conv_macs(288, 384, 3, 3, 17)
    + _conv_macs(288, 64, 1, 1, 35)
    + _conv_macs(64, 96, 3, 3, 35)
    + _conv_macs(96, 96, 3, 3, 17)
    # four 17x17 blocks
    + sum(_inception_17(c7) for c7 in (128, 160, 160, 192))
    # 17 -> 8 reduction: 1x1 192 -> 3x3/2 320; 1x1 192 -> 1x7 -> 7x1 -> 3x3/2 192
    + _conv_macs(768, 192, 1, 1, 17)
    + _conv_macs(192, 320, 3, 3, 8)
    + _conv_macs(768, 192, 1, 1, 17)
    + 2 * _conv_macs(192, 192, 1, 7, 17)
    + _conv_macs(192, 192, 3, 3, 8)
    # two 8x8 blocks: 1280 -> 2048 -> 2048 channels, then the 2048 -> 1000 classifier
    + _inception_8(1280)
    + _inception_8(2048)
    + 2048 * 1000
)


def test_inception_v3_forward_macs_match_the_layer_table_and_torchvision() -> None:
    model = _on_meta("inception-v3").eval()  # eval: the aux head does not run
    macs = _matmul_macs(capture_forward(model, torch.empty(1, 3, 299, 299, device="meta")))
    assert macs == INCEPTION_V3_MACS == 5_713_216_096
    # torchvision Inception_V3_Weights.IMAGENET1K_V1.meta["_ops"]: 5.713 GMACs, to 3 places
    assert abs(macs / 1e9 - 5.713) <= 0.0005


# --- MobileNetV3-Large forward MACs --------------------------------------------------------

# Table 1 of the paper: (kernel, expansion, output, squeeze width or 0, stride). The
# squeeze width is expansion / 4 rounded to a multiple of 8 (72 / 4 = 18 -> 24).
MOBILENET_V3_LARGE = [
    (3, 16, 16, 0, 1),
    (3, 64, 24, 0, 2),
    (3, 72, 24, 0, 1),
    (5, 72, 40, 24, 2),
    (5, 120, 40, 32, 1),
    (5, 120, 40, 32, 1),
    (3, 240, 80, 0, 2),
    (3, 200, 80, 0, 1),
    (3, 184, 80, 0, 1),
    (3, 184, 80, 0, 1),
    (3, 480, 112, 120, 1),
    (3, 672, 112, 168, 1),
    (5, 672, 160, 168, 2),
    (5, 960, 160, 240, 1),
    (5, 960, 160, 240, 1),
]


def _mobilenet_v3_large_macs() -> int:
    """Convs and fully connected layers of MobileNetV3-Large on one 224x224 image."""
    macs = _conv_macs(3, 16, 3, 3, 112)  # stem, 3x3/2
    cin, side = 16, 112
    for kernel, expand, out, squeeze, stride in MOBILENET_V3_LARGE:
        if expand != cin:
            macs += _conv_macs(cin, expand, 1, 1, side)  # 1x1 expansion, before the stride
        side //= stride
        macs += _conv_macs(expand, expand, kernel, kernel, side, groups=expand)  # depthwise
        macs += 2 * expand * squeeze  # excitation: two fully connected layers on [expand]
        macs += _conv_macs(expand, out, 1, 1, side)  # 1x1 projection
        cin = out
    macs += _conv_macs(160, 960, 1, 1, 7)  # last conv on the 7x7 grid
    return macs + 960 * 1280 + 1280 * 1000  # classifier on the pooled features


def test_mobilenet_v3_large_forward_macs_match_the_layer_table_and_torchvision() -> None:
    model = _on_meta("mobilenetv3-large").eval()
    macs = _matmul_macs(capture_forward(model, torch.empty(1, 3, 224, 224, device="meta")))
    assert macs == _mobilenet_v3_large_macs() == 216_589_760
    # torchvision MobileNet_V3_Large_Weights.IMAGENET1K_V1.meta["_ops"]: 0.217 GMACs
    assert abs(macs / 1e9 - 0.217) <= 0.0005


# --- outputs and losses -------------------------------------------------------------------


def test_inception_returns_aux_logits_in_training_only() -> None:
    model = _on_meta("inception-v3")
    image = torch.empty(2, 3, 299, 299, device="meta")
    logits, aux = model(image)
    assert (tuple(logits.shape), tuple(aux.shape)) == ((2, 1000), (2, 1000))
    assert tuple(model.eval()(image).shape) == (2, 1000)


def test_mobilenet_maps_images_to_logits() -> None:
    image = torch.empty(2, 3, 224, 224, device="meta")
    assert tuple(_on_meta("mobilenetv3-large")(image).shape) == (2, 1000)


def test_inception_loss_adds_the_aux_loss_with_weight_0_4() -> None:
    workload = suite.get("inception-v3-tiny")
    torch.manual_seed(0)
    model = workload.model()
    x, y = workload.batch(2)
    torch.manual_seed(1)  # the same dropout mask in both forwards
    logits, aux = model(x)
    main_loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    expected = main_loss + 0.4 * F.cross_entropy(aux, y, label_smoothing=0.1)
    torch.manual_seed(1)
    torch.testing.assert_close(inception_loss(model, (x, y)), expected)


# --- FLOP formulas -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["inception-v3-tiny", "mobilenetv3-large-tiny"])
def test_every_op_of_the_tiny_steps_has_a_flop_formula(name: str) -> None:
    ops = capture_step(prepare(suite.get(name), StepSettings()))
    assert [op.name for op in ops if not op.flops_known] == []


def _flops(recorder: CostRecorder, packet: Any) -> list[int]:
    return [cost.flops for cost in recorder.of(packet)]


def test_hard_activation_flops_forward_and_backward() -> None:
    x = torch.randn(4, 5, requires_grad=True)  # 20 elements
    recorder = CostRecorder()
    with recorder:
        F.hardswish(x).sum().backward()
        F.hardsigmoid(x).sum().backward()
        nn.Hardswish(inplace=True)(x * 1).sum().backward()  # in place on a non-leaf
    assert _flops(recorder, aten.hardswish) == [100]  # 5 * 20
    assert _flops(recorder, aten.hardswish_) == [100]  # 5 * 20, in place
    assert _flops(recorder, aten.hardswish_backward) == [100, 100]  # 5 * 20 each
    assert _flops(recorder, aten.hardsigmoid) == [80]  # 4 * 20
    assert _flops(recorder, aten.hardsigmoid_backward) == [60]  # 3 * 20
    assert all(c.cost.flops_known and c.cost.macs is None for c in recorder.calls)
