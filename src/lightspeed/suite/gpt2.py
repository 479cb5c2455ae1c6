"""`gpt2-small` and `gpt2-tiny`: a decoder-only GPT-2 trained on synthetic token ids.

The model follows karpathy/nanoGPT's `model.py` with `bias=False`: pre-LayerNorm blocks
of causal self-attention and a 4x GELU MLP, learned position embeddings, the LM head
tied to the token embedding, no bias in any Linear or LayerNorm, no dropout. With the
GPT-2 small shape (12 layers, 12 heads, d=768, T=1024, vocab 50257) it has 124,337,664
parameters, position embeddings included and the tied weight counted once.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.errors import ConfigError
from lightspeed.suite import register
from lightspeed.workload import Workload


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """The shape of a GPT: sizes in tokens (`block_size`, `vocab_size`) and channels."""

    layers: int = 12
    heads: int = 12
    d_model: int = 768
    block_size: int = 1024
    vocab_size: int = 50257

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(
                f"GPTConfig: d_model {self.d_model} must be a multiple of heads {self.heads}."
            )


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where token t sees tokens <= t: [B, T, C] -> [B, T, C]."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        # q, k and v projections in one matmul: [B, T, C] -> [B, T, 3C].
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        # [B, T, C] -> [B, heads, T, C / heads]: SDPA attends over the last two dims.
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-LN transformer block, x + attn(ln(x)) then x + mlp(ln(x)): [B, T, C] -> [B, T, C]."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.ln_attn = nn.LayerNorm(d, bias=False)
        self.attn = CausalSelfAttention(config)
        self.ln_mlp = nn.LayerNorm(d, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(d, 4 * d, bias=False), nn.GELU(), nn.Linear(4 * d, d, bias=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))


class GPT(nn.Module):
    """Token ids [B, T] (T <= block_size) -> next-token logits [B, T, vocab_size]."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.block_size, config.d_model)
        self.blocks = nn.Sequential(*(Block(config) for _ in range(config.layers)))
        self.ln_final = nn.LayerNorm(config.d_model, bias=False)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Weight tying (Press & Wolf 2017), as GPT-2 does: one [vocab, C] matrix.
        self.lm_head.weight = self.token_embedding.weight
        self.apply(_init_weights)
        # GPT-2 paper: scale the init of residual projections by 1/sqrt(2 * layers), so
        # the residual stream's variance does not grow with depth.
        for name, param in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.config.block_size:
            raise ConfigError(
                f"GPT: sequence of {t} tokens exceeds block_size {self.config.block_size}."
            )
        positions = torch.arange(t, device=idx.device)
        x = self.token_embedding(idx) + self.position_embedding(positions)  # [B, T, C]
        return self.lm_head(self.ln_final(self.blocks(x)))


def _init_weights(module: nn.Module) -> None:
    # GPT-2's init: N(0, 0.02) for every matrix and embedding.
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def token_batch(
    batch_size: int, block_size: int, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random token ids: inputs [batch_size, block_size] and targets shifted by one."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab_size, (batch_size, block_size + 1), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def next_token_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy in nats per token of the logits against the next token."""
    idx, targets = batch
    logits = model(idx)  # [B, T, vocab]
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _gpt_workload(name: str, config: GPTConfig, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: GPT(config),
        batch=lambda n: token_batch(n, config.block_size, config.vocab_size),
        loss=next_token_loss,
        batch_size=batch_size,
        tokens_per_sample=config.block_size,
    )


@register("gpt2-small", "GPT-2 small (124 M), 1024 synthetic tokens, batch 8")
def gpt2_small() -> Workload:
    """GPT-2 small: 12 layers, 12 heads, d=768, T=1024, vocab 50257; 124,337,664 parameters."""
    return _gpt_workload("gpt2-small", GPTConfig(), batch_size=8)


@register("gpt2-tiny", "GPT-2 shape, 2 layers, d=128, 128 synthetic tokens, vocab 1024, batch 4")
def gpt2_tiny() -> Workload:
    """2 layers, 2 heads, d=128, T=128, vocab 1024: 0.54 M parameters."""
    config = GPTConfig(layers=2, heads=2, d_model=128, block_size=128, vocab_size=1024)
    return _gpt_workload("gpt2-tiny", config, batch_size=4)
