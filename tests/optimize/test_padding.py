"""padding_suggestions: the layer sizes off the tensor-core multiple, and what to pad them to.

Models are built on the meta device where they are large: only their shapes are read.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from lightspeed import rules, suite
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.optimize.padding import DATA_WIDTH, PadSuggestion, padding_suggestions
from lightspeed.suite.gpt2 import GPTConfig


class Mixed(nn.Module):
    """One of each kind of layer padding_suggestions reads."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(100, 30)
        self.embedding = nn.Embedding(50257, 64)
        self.conv = nn.Conv2d(3, 20, 3)  # 3 input channels: the images'
        self.depthwise = nn.Conv2d(20, 20, 3, groups=20)  # one channel a group: no GEMM
        self.lstm = nn.LSTM(30, 50)


def rows(suggestions: list[PadSuggestion]) -> list[tuple[str, str, str, int, int]]:
    return [(s.module, s.kind, s.dimension, s.size, s.padded) for s in suggestions]


def test_each_unaligned_size_in_module_order() -> None:
    found = padding_suggestions(Mixed(), Precision.BF16)
    assert rows(found) == [
        ("fc", "Linear", "in_features", 100, 104),  # 8 * 13 = 104
        ("fc", "Linear", "out_features", 30, 32),  # 8 * 4
        ("embedding", "Embedding", "num_embeddings", 50257, 50264),  # 8 * 6283 = 50264
        ("conv", "Conv2d", "out_channels", 20, 24),  # in_channels 3 is the data's
        ("lstm", "LSTM", "input_size", 30, 32),
        ("lstm", "LSTM", "hidden_size", 50, 56),  # 8 * 7
    ]
    assert {s.multiple for s in found} == {8}
    assert found[0].excess == pytest.approx(4 / 100)  # 104 / 100 - 1
    assert found[2].excess == pytest.approx(7 / 50257)


def test_text_names_the_module_and_the_work_padding_costs() -> None:
    found = padding_suggestions(Mixed(), "fp16")
    assert found[2].text == "embedding.num_embeddings 50257 → 50264 (+0.01 % work)"
    # The model itself has no name: its class stands in.
    (only,) = padding_suggestions(nn.Linear(64, 30), "fp16")
    assert only.module == ""
    assert only.text == "Linear.out_features 30 → 32 (+6.67 % work)"  # 2 / 30


def test_aligned_models_get_none() -> None:
    aligned = nn.Sequential(
        nn.Conv2d(3, 64, 7),  # 3 input channels are the data's
        nn.Conv2d(64, 64, 3, groups=64),
        nn.Linear(64, 128),
        nn.Embedding(1024, 256),
        nn.MultiheadAttention(64, 8),
        nn.GRU(64, 128, batch_first=True),
        nn.Linear(128, 1),  # one score: the task's
    )
    assert padding_suggestions(aligned, "bf16") == []


def test_multiple_64_pads_gpt2s_vocabulary_as_nanogpt_does() -> None:
    found = padding_suggestions(Mixed(), "bf16", multiple=64)
    assert [(s.dimension, s.size, s.padded) for s in found] == [
        ("in_features", 100, 128),
        ("out_features", 30, 64),
        ("num_embeddings", 50257, 50304),  # 64 * 786: nanoGPT's padded vocab_size
        ("out_channels", 20, 64),
        ("input_size", 30, 64),
        ("hidden_size", 50, 64),
    ]
    # embedding_dim 64 is aligned to 64 as well; a multiple of 1 aligns everything.
    assert padding_suggestions(Mixed(), "bf16", multiple=1) == []


def test_a_precision_without_tensor_cores_needs_a_multiple() -> None:
    with pytest.raises(ConfigError, match=r"fp32 runs on no tensor cores.*multiple="):
        padding_suggestions(Mixed(), "fp32")
    # With one, the precision does not matter.
    assert rows(padding_suggestions(Mixed(), "fp32", multiple=8)) == rows(
        padding_suggestions(Mixed(), "bf16")
    )
    with pytest.raises(ConfigError, match="positive"):
        padding_suggestions(Mixed(), "bf16", multiple=0)
    with pytest.raises(ConfigError, match="not a precision"):
        padding_suggestions(Mixed(), "fp12")


def test_grouped_convolutions_are_padded_per_group() -> None:
    found = padding_suggestions(nn.Conv2d(20, 30, 3, groups=2), "fp16")
    # Each group is a GEMM over 10 input channels to 15 outputs: 10 → 16, 15 → 16.
    assert [(s.dimension, s.size, s.padded, s.groups) for s in found] == [
        ("in_channels", 20, 32, 2),
        ("out_channels", 30, 32, 2),
    ]
    assert found[0].text == "Conv2d.in_channels 20 → 32 (2 groups of 10 → 16, +60.00 % work)"
    # Depthwise, with or without a channel multiplier: no matrix product to pad.
    assert padding_suggestions(nn.Conv2d(20, 40, 3, groups=20), "fp16") == []


def test_attention_is_reported_once_by_its_embed_dim() -> None:
    model = nn.Sequential(nn.MultiheadAttention(20, 2))
    # Its out_proj is a 20 × 20 Linear, covered by embed_dim.
    assert rows(padding_suggestions(model, "bf16")) == [
        ("0", "MultiheadAttention", "embed_dim", 20, 24)
    ]


def test_a_shared_module_is_reported_once_and_tied_modules_each() -> None:
    shared = nn.Linear(20, 20)
    twice = padding_suggestions(nn.Sequential(shared, shared), "bf16")
    # "1" is the same module as "0": its in_features and out_features are reported once.
    assert [(s.module, s.dimension) for s in twice] == [("0", "in_features"), ("0", "out_features")]
    tied = nn.ModuleDict({"embed": nn.Embedding(30, 16), "head": nn.Linear(16, 30)})
    tied["head"].weight = tied["embed"].weight
    assert [(s.module, s.dimension) for s in padding_suggestions(tied, "bf16")] == [
        ("embed", "num_embeddings"),
        ("head", "out_features"),
    ]


def test_gpt2_small_from_the_suite_needs_only_its_vocabulary_padded() -> None:
    config = GPTConfig()
    with torch.device("meta"):
        model = suite.get("gpt2-small").model()
    # By hand: every matmul dimension of GPT-2 small, and those rules finds unaligned.
    dims = {
        "d_model": config.d_model,  # 768 = 8 * 96
        "qkv": 3 * config.d_model,  # 2304
        "mlp": 4 * config.d_model,  # 3072
        "positions": config.block_size,  # 1024
        "vocab": config.vocab_size,  # 50257 = 8 * 6282 + 1
    }
    assert rules.unaligned_dims(dims, Precision.BF16) == {"vocab": 50257}
    vocab = rules.padded({"vocab": 50257}, Precision.BF16)["vocab"]
    assert [s.text for s in padding_suggestions(model, "bf16")] == [
        f"token_embedding.num_embeddings 50257 → {vocab} (+0.01 % work)",
        f"lm_head.out_features 50257 → {vocab} (+0.01 % work)",
    ]
    with torch.device("meta"):
        tiny = suite.get("gpt2-tiny").model()
    assert padding_suggestions(tiny, "bf16") == []  # d=128, vocab 1024, T=128


@given(
    size_in=st.integers(1, 5000),
    size_out=st.integers(1, 5000),
    multiple=st.sampled_from([4, 8, 16, 32, 64]),
)
def test_padding_as_suggested_leaves_nothing_to_pad(
    size_in: int, size_out: int, multiple: int
) -> None:
    found = padding_suggestions(
        nn.Linear(size_in, size_out, device="meta"), "bf16", multiple=multiple
    )
    expected = {
        name: size
        for name, size in (("in_features", size_in), ("out_features", size_out))
        if size > DATA_WIDTH and size % multiple
    }
    assert {s.dimension: s.size for s in found} == expected
    for s in found:
        # The least multiple at or above the size, costing less than one multiple more.
        assert s.padded % multiple == 0 and s.size < s.padded < s.size + multiple
        assert 0 < s.excess < multiple / s.size
    padded = {s.dimension: s.padded for s in found}
    again = nn.Linear(
        padded.get("in_features", size_in), padded.get("out_features", size_out), device="meta"
    )
    assert padding_suggestions(again, "bf16", multiple=multiple) == []
