"""The Llama family: LLaMA-7B's published size on the meta device and under a
FakeTensorMode, rotary embeddings' relative-position property, causality, and a tiny
model that trains on the CPU.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from lightspeed import suite
from lightspeed.errors import ConfigError
from lightspeed.measure.capture import capture_forward
from lightspeed.suite.llama import Llama, LlamaConfig, apply_rotary, rotary_tables


def _num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _on_meta(name: str) -> torch.nn.Module:
    with torch.device("meta"):
        return suite.get(name).model()


def _tiny() -> Llama:
    torch.manual_seed(0)
    model = suite.get("llama-tiny").model()
    assert isinstance(model, Llama)
    return model


# --- sizes ------------------------------------------------------------------------------


def test_llama_7b_has_the_published_6_738_415_616_parameters() -> None:
    # Touvron et al. 2023, LLaMA-7B; the same shape as Hugging Face's Llama-2-7b config.
    # embedding and untied head  2 * 32000*4096                       =   262,144,000
    # per layer  wq, wk, wv, wo  4 * 4096**2                           =    67,108,864
    #            SwiGLU w1, w3, w2  3 * 4096*11008                     =   135,266,304
    #            two RMSNorms  2 * 4096                                =         8,192
    # 32 layers  32 * 202,383,360                                      = 6,476,267,520
    # final RMSNorm                                                    =         4,096
    formula = 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096
    assert formula == 6_738_415_616
    assert _num_params(_on_meta("llama-7b")) == formula


def test_llama_tiny_size_counts_grouped_key_value_heads() -> None:
    # d = 128, 4 query heads of 32 channels, 2 key/value heads: wk and wv are 128 x 64.
    # per layer  128*128 (wq) + 2 * 128*64 (wk, wv) + 128*128 (wo)      =  49,152
    #            3 * 128*344 (SwiGLU) + 2 * 128 (RMSNorms)              = 132,352
    # total      2 * 1000*128 + 2 * 181,504 + 128                       = 619,136
    assert _num_params(_tiny()) == 619_136


def test_llama_has_no_biases_and_an_untied_head() -> None:
    model = _on_meta("llama-7b")
    assert isinstance(model, Llama)
    assert [n for n, _ in model.named_parameters() if n.endswith("bias")] == []
    assert model.lm_head.weight is not model.token_embedding.weight


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"d_model": 100, "heads": 12}, "multiple of heads"),
        ({"heads": 32, "kv_heads": 5}, "multiple of kv_heads"),
        ({"heads": 32, "kv_heads": 0}, "multiple of kv_heads"),
        ({"d_model": 96, "heads": 32}, "must be even"),
    ],
)
def test_llama_config_rejects_shapes_it_cannot_build(change: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LlamaConfig(**change)


# --- shape-only analysis of the 7B model ------------------------------------------------


def test_llama_7b_maps_a_short_batch_to_logits_on_meta() -> None:
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
    assert tuple(_on_meta("llama-7b")(ids).shape) == (2, 16, 32000)


def test_llama_7b_builds_and_runs_a_training_step_under_a_fake_tensor_mode() -> None:
    workload = suite.get("llama-7b")
    with FakeTensorMode() as mode:
        model = workload.model()
        assert isinstance(model, Llama)
        batch = tuple(mode.from_tensor(t) for t in workload.batch(workload.batch_size))
        loss = workload.loss(model, batch)
        loss.backward()
    # Fake parameters carry shapes only: 6.7 B of them allocate nothing.
    assert all(isinstance(p, FakeTensor) for p in model.parameters())
    assert _num_params(model) == 6_738_415_616
    assert loss.shape == ()
    assert model.lm_head.weight.grad is not None
    assert model.lm_head.weight.grad.shape == (32000, 4096)


def test_llama_tiny_forward_macs_match_its_layers() -> None:
    # Per layer at T = 64, d = 128, 4 query heads of 32 channels, 2 key/value heads:
    # wq and wo 2·T·d² = 2,097,152; wk and wv 2·T·d·64 = 1,048,576; QKᵀ and P·V over the
    # query heads 2·T²·d = 1,048,576; SwiGLU 3·T·d·344 = 8,454,144;
    # 2 layers and the head T·d·1000 = 8,192,000: 33,488,896 per sample.
    t, d = 64, 128
    per_layer = 2 * t * d * d + 2 * t * d * 64 + 2 * t * t * d + 3 * t * d * 344
    per_sample = 2 * per_layer + t * d * 1000
    assert per_sample == 33_488_896
    model = _on_meta("llama-tiny")
    ids = torch.zeros(3, t, dtype=torch.long, device="meta")
    assert sum(op.macs or 0 for op in capture_forward(model, ids)) == 3 * per_sample


# --- rotary embeddings ------------------------------------------------------------------


def test_rope_scores_depend_only_on_the_distance_between_positions() -> None:
    # RoFormer (Su et al. 2021), eq. 16: <R(m) q, R(n) k> = <q, R(n - m) k>, so moving
    # every query and key by the same offset leaves all the attention scores unchanged.
    config = _tiny().config
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(config.heads, 16, config.head_dim, generator=generator)
    k = torch.randn(config.heads, 16, config.head_dim, generator=generator)

    def scores(offset: int) -> torch.Tensor:
        positions = torch.arange(16) + offset
        cos, sin = rotary_tables(positions, config.head_dim, config.rope_theta)
        return apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).transpose(-1, -2)

    # The angles are fp32, off by up to ~6e-5 rad near position 1000: that moves these
    # scores (mean size 4.6) by 3e-4 at most; rotating keys one position off moves them by 9.
    torch.testing.assert_close(scores(37), scores(0), rtol=0, atol=1e-4)
    torch.testing.assert_close(scores(1000), scores(0), rtol=0, atol=1e-3)
    # Not vacuous: the rotation changes the scores away from the diagonal.
    assert not torch.allclose(scores(0), q @ k.transpose(-1, -2))


def test_rope_is_a_rotation_and_position_zero_is_the_identity() -> None:
    x = torch.randn(2, 4, 8, 32, generator=torch.Generator().manual_seed(0))
    cos, sin = rotary_tables(torch.arange(8), head_dim=32)
    rotated = apply_rotary(x, cos, sin)
    assert torch.equal(rotated[..., 0, :], x[..., 0, :])  # cos 0 = 1, sin 0 = 0 exactly
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    # Channel pair 0 turns by one radian per position: theta^0 = 1.
    assert cos[1, 0].item() == pytest.approx(math.cos(1.0))


# --- the tiny model on real tensors -----------------------------------------------------


def test_a_later_token_does_not_change_earlier_logits() -> None:
    model = _tiny().eval()
    ids, _ = suite.get("llama-tiny").batch(2)
    changed = ids.clone()
    changed[:, 40] = (changed[:, 40] + 1) % 1000
    with torch.no_grad():
        before, after = model(ids), model(changed)
    torch.testing.assert_close(after[:, :40], before[:, :40])
    assert not torch.allclose(after[:, 40:], before[:, 40:])


def test_llama_tiny_starts_near_uniform_and_its_loss_falls_with_adamw() -> None:
    workload = suite.get("llama-tiny")
    model = _tiny()
    optimizer = workload.optimizer(model.parameters())
    batch = workload.batch(workload.batch_size)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = workload.loss(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # Small initial weights give near-uniform logits: ln(1000) = 6.91 nats per token.
    assert losses[0] == pytest.approx(math.log(1000), abs=0.05)
    assert all(b < a for a, b in itertools.pairwise(losses))
