"""Gist encodings: lossless (gradients bit-equal to PyTorch's own modules), and the
memory they save where nothing else keeps the encoded tensor, predicted on fake tensors
and measured on a real step."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from factories import FAKE_CPU, VGGStyle, vgg_workload
from lightspeed.errors import ConfigError
from lightspeed.measure.memory import measure_memory
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.optimize.encodings import (
    GistLeakyReLU,
    GistMaxPool2d,
    GistReLU,
    GistReLU6,
    candidates,
    gist,
    pack_bits,
    unpack_bits,
)
from lightspeed.predict.encodings import gist_savings
from lightspeed.workload import Workload


@given(st.lists(st.booleans(), min_size=1, max_size=70), st.integers(1, 3))
def test_bits_pack_and_unpack_to_the_same_mask(values: list[bool], rows: int) -> None:
    mask = torch.tensor(values * rows).view(rows, len(values))
    packed = pack_bits(mask)
    assert packed.dtype == torch.uint8 and packed.numel() == -(-mask.numel() // 8)
    assert torch.equal(unpack_bits(packed, mask.shape), mask)


def awkward_input(shape: tuple[int, ...]) -> torch.Tensor:
    """Random values with exact zeros, sixes and a NaN: the edges of each mask."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 4
    flat = x.view(-1)
    flat[::7] = 0.0
    flat[3::11] = 6.0
    flat[5] = float("nan")
    return x


@pytest.mark.parametrize(
    ("plain", "encoded"),
    [
        (nn.ReLU(), GistReLU()),
        (nn.ReLU(inplace=True), GistReLU()),
        (nn.ReLU6(), GistReLU6()),
        (nn.LeakyReLU(0.1), GistLeakyReLU(0.1)),
    ],
)
def test_activations_give_pytorchs_own_outputs_and_gradients(
    plain: nn.Module, encoded: nn.Module
) -> None:
    x = awkward_input((3, 5, 7))
    grad = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(1))
    results = []
    for module in (plain, encoded):
        leaf = x.clone().requires_grad_()
        out = module(leaf * 1.0)  # a non-leaf input, as in a model
        out.backward(grad)
        results.append((out.detach(), leaf.grad))
    (out_a, grad_a), (out_b, grad_b) = results
    assert torch.equal(out_a, out_b) or torch.allclose(out_a, out_b, equal_nan=True)
    assert grad_a is not None and grad_b is not None
    assert torch.equal(grad_a.nan_to_num(7.0), grad_b.nan_to_num(7.0))


POOLS = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2},
    {"kernel_size": 3, "stride": 1, "padding": 1},
    {"kernel_size": (2, 3), "stride": (2, 1), "dilation": (1, 2)},
    {"kernel_size": 3, "stride": 2, "ceil_mode": True},
]


@pytest.mark.parametrize("geometry", POOLS)
def test_max_pooling_gives_pytorchs_own_outputs_and_gradients(geometry: dict) -> None:
    x = torch.randn(2, 3, 11, 13, generator=torch.Generator().manual_seed(2))
    x[0, 0, :4, :4] = 1.0  # ties: the first in each window wins, in both
    results = []
    for module in (nn.MaxPool2d(**geometry), GistMaxPool2d(**geometry)):
        leaf = x.clone().requires_grad_()
        out = module(leaf * 1.0)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
        out.backward(grad)
        results.append((out.detach(), leaf.grad))
    (out_a, grad_a), (out_b, grad_b) = results
    assert torch.equal(out_a, out_b)
    assert grad_a is not None and grad_b is not None and torch.equal(grad_a, grad_b)


def stepped(workload: Workload) -> PreparedStep:
    torch.manual_seed(0)
    prepared = prepare(workload, StepSettings())
    prepared.step()
    return prepared


def test_a_gist_step_equals_the_plain_step_bit_for_bit() -> None:
    plain, encoded = stepped(vgg_workload()), stepped(gist(vgg_workload()))
    assert encoded.workload.name == "vgg-style+gist"
    assert sum(isinstance(m, (GistReLU, GistMaxPool2d)) for m in encoded.model.modules()) == 10
    assert plain.last_loss is not None and encoded.last_loss is not None
    assert torch.equal(plain.last_loss, encoded.last_loss)
    theirs = dict(plain.model.named_parameters())
    for name, param in encoded.model.named_parameters():
        assert torch.equal(param, theirs[name]), name
        assert param.grad is not None and torch.equal(param.grad, theirs[name].grad), name


def test_a_vgg_style_cnn_keeps_a_fifth_less_and_the_prediction_says_how_much() -> None:
    measured = {
        name: measure_memory(stepped(w)).activations_bytes
        for name, w in (("plain", vgg_workload()), ("gist", gist(vgg_workload())))
    }
    saved = 1 - measured["gist"] / measured["plain"]
    assert saved >= 0.20
    predicted = gist_savings(vgg_workload(), FAKE_CPU)
    assert predicted.activations_bytes == measured["plain"]
    assert predicted.saved_fraction == pytest.approx(saved, rel=0.05)
    # Each block's second ReLU feeds a max-pool: encoding both frees its output. A ReLU
    # feeding a convolution frees nothing, and its mask costs: the convolution keeps it.
    assert candidates(VGGStyle()) == [
        "features.1",
        "features.3",
        "features.4",
        "features.6",
        "features.8",
        "features.9",
        "features.11",
        "features.13",
        "features.14",
        "head.2",
    ]
    assert predicted.helpful == (
        "features.3",
        "features.4",
        "features.8",
        "features.9",
        "features.13",
        "features.14",
    )
    for feeds_conv in ("features.1", "features.6", "features.11"):
        assert predicted.by_module[feeds_conv] < 0
    only_helpful = measure_memory(stepped(gist(vgg_workload(), predicted.helpful)))
    assert only_helpful.activations_bytes < measured["gist"]


def test_a_model_without_candidates_is_refused_with_one_line() -> None:
    workload = Workload(
        name="linear",
        model=lambda: nn.Linear(4, 2),
        batch=lambda n: torch.randn(n, 4),
        loss=lambda m, b: m(b).sum(),
        batch_size=2,
    )
    with pytest.raises(ConfigError, match=r"no nn\.ReLU") as raised:
        gist(workload).model()
    assert "\n" not in str(raised.value)


def test_an_unknown_module_name_lists_the_candidates() -> None:
    with pytest.raises(ConfigError, match=r"features\.0 is not a ReLU.*features\.1, features\.3"):
        gist(vgg_workload(), ["features.0"]).model()
