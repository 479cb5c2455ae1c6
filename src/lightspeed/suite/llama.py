"""`llama-7b` and `llama-tiny`: a Llama decoder (Touvron et al. 2023) on synthetic token ids.

Pre-norm blocks with RMSNorm, rotary position embeddings (RoPE) on queries and keys,
causal attention with optional grouped-query heads (`kv_heads` < `heads`), a SwiGLU
MLP, no bias anywhere and an LM head apart from the token embedding. With LLaMA-7B's
shape (32 layers, 32 heads, d=4096, SwiGLU hidden 11008, vocab 32000) it has
6,738,415,616 parameters.

`llama-7b` is for shape-only analysis: its weights alone take 27 GB in fp32, so it is
built on the meta device or under a FakeTensorMode, where nothing is allocated. Nothing
in building the model is sized by the sequence: the RoPE tables are made in `forward`
with torch ops, so under such a mode they are fake too.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.errors import ConfigError
from lightspeed.suite import register
from lightspeed.suite.gpt2 import next_token_loss, token_batch
from lightspeed.workload import Workload


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlamaConfig:
    """The shape of a Llama: sizes in tokens (`seq_len`, `vocab_size`) and channels.

    `kv_heads` is the number of key/value heads (grouped-query attention); None means
    one per query head. `ffn_hidden` is the width of the SwiGLU gate and up projections.
    """

    layers: int = 32
    heads: int = 32
    kv_heads: int | None = None
    d_model: int = 4096
    ffn_hidden: int = 11008
    vocab_size: int = 32000
    seq_len: int = 2048
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(
                f"LlamaConfig: d_model {self.d_model} must be a multiple of heads {self.heads}."
            )
        if (self.d_model // self.heads) % 2:
            raise ConfigError(
                f"LlamaConfig: the head dimension {self.d_model // self.heads} must be even:"
                " RoPE rotates channels in pairs."
            )
        if self.n_kv_heads < 1 or self.heads % self.n_kv_heads:
            raise ConfigError(
                f"LlamaConfig: heads {self.heads} must be a multiple of kv_heads"
                f" {self.kv_heads} (at least 1)."
            )

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads: `kv_heads`, or `heads` when it is None."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_dim(self) -> int:
        """Channels per attention head."""
        return self.d_model // self.heads


def rotary_tables(
    positions: torch.Tensor, head_dim: int, theta: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the RoPE angles, each [T, head_dim / 2], for positions [T].

    Channel pair i turns by position·theta^(-2i / head_dim) (RoFormer, Su et al. 2021,
    eq. 15). Computed in fp32 with torch ops on `positions`' device.
    """
    exponents = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32)
    inv_freq = theta ** (-exponents / head_dim)  # [head_dim / 2]
    angles = torch.outer(positions.to(torch.float32), inv_freq)  # [T, head_dim / 2]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each channel pair (2i, 2i+1) of x [..., T, D] by the angles of `rotary_tables`.

    Adjacent channels form a pair, as in Meta's reference code (not the split halves
    of some ports), so the weights' layout would match LLaMA checkpoints.
    """
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # in x's dtype, so autocast keeps it there
    even, odd = x[..., 0::2], x[..., 1::2]  # [..., T, D / 2] each
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2)  # interleave back: [..., T, D / 2, 2] -> [..., T, D]


class Attention(nn.Module):
    """Causal self-attention with RoPE and grouped-query heads: [B, T, C] -> [B, T, C]."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.n_kv_heads, config.head_dim
        self.wq = nn.Linear(config.d_model, config.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.d_model, self.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.d_model, self.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(config.heads * self.head_dim, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        # [B, T, heads * D] -> [B, heads, T, D]: SDPA attends over the last two dims.
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        # Each group of heads / kv_heads query heads shares one key/value head.
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads
        )
        return self.wo(y.transpose(1, 2).reshape(b, t, c))


class FeedForward(nn.Module):
    """SwiGLU MLP (Shazeer 2020), w2(silu(w1 x) * w3 x): [B, T, C] -> [B, T, C]."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.d_model, config.ffn_hidden, bias=False)  # gate
        self.w3 = nn.Linear(config.d_model, config.ffn_hidden, bias=False)  # up
        self.w2 = nn.Linear(config.ffn_hidden, config.d_model, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm block, x + attn(norm(x)) then x + mlp(norm(x)): [B, T, C] -> [B, T, C]."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mlp = FeedForward(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    """Token ids [B, T] (T <= seq_len) -> next-token logits [B, T, vocab_size]."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # The paper gives no init; N(0, 0.02) for every matrix, as GPT-2 and most Llama
        # training code do. RMSNorm weights start at one.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.config.seq_len:
            raise ConfigError(
                f"Llama: sequence of {t} tokens exceeds seq_len {self.config.seq_len}."
            )
        # One table for all layers; [T, head_dim / 2] is small next to any activation.
        positions = torch.arange(t, device=idx.device)
        cos, sin = rotary_tables(positions, self.config.head_dim, self.config.rope_theta)
        x = self.token_embedding(idx)  # [B, T, C]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))


def _llama_workload(name: str, config: LlamaConfig, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: Llama(config),
        batch=lambda n: token_batch(n, config.seq_len, config.vocab_size),
        loss=next_token_loss,
        batch_size=batch_size,
        tokens_per_sample=config.seq_len,
    )


@register(
    "llama-7b", "Llama 7B (6.74 B) for --shape-only profiling, 2048 synthetic tokens, batch 1"
)
def llama_7b() -> Workload:
    """LLaMA-7B: 32 layers, 32 heads, d=4096, SwiGLU 11008, vocab 32000, T=2048;
    6,738,415,616 parameters. Too large to run here: build it on fake or meta tensors."""
    return _llama_workload("llama-7b", LlamaConfig(), batch_size=1)


@register(
    "llama-tiny",
    "Llama shape, 2 layers, d=128, 4 heads / 2 KV heads, 64 synthetic tokens, vocab 1000, batch 4",
)
def llama_tiny() -> Workload:
    """2 layers, 4 query heads sharing 2 key/value heads, d=128, SwiGLU 344, vocab 1000,
    T=64: 619,136 parameters."""
    config = LlamaConfig(
        layers=2, heads=4, kv_heads=2, d_model=128, ffn_hidden=344, vocab_size=1000, seq_len=64
    )
    return _llama_workload("llama-tiny", config, batch_size=4)
