"""`transformer-encoder` and its `-tiny` variant: a BERT-style sequence classifier.

Token embeddings plus learned position embeddings feed a stack of PyTorch's own
`nn.TransformerEncoderLayer`s (so the workload exercises the kernels a user of
`torch.nn.TransformerEncoder` gets), then a final LayerNorm, a mean over the sequence
and a linear head. The layers are pre-LayerNorm (`norm_first=True`, as GPT-2 and most
encoders trained since): unlike BERT's post-LN they train stably without a warm-up,
and the final LayerNorm normalizes the residual stream the last layer leaves unnormed.
The MLP is 4x wide with GELU, dropout is 0, so that steps are deterministic.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from lightspeed.errors import ConfigError
from lightspeed.suite import register
from lightspeed.suite.mlp import classification_loss
from lightspeed.workload import Workload


@dataclasses.dataclass(frozen=True, kw_only=True)
class EncoderConfig:
    """The shape of the encoder: sizes in tokens (`seq_len`, `vocab_size`) and channels."""

    layers: int = 6
    heads: int = 8
    d_model: int = 512
    seq_len: int = 256
    vocab_size: int = 30522  # BERT's WordPiece vocabulary
    classes: int = 2

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(
                f"EncoderConfig: d_model {self.d_model} must be a multiple of heads {self.heads}."
            )


class EncoderClassifier(nn.Module):
    """Token ids [B, T] (T <= seq_len) -> class logits [B, classes]."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, d)
        self.position_embedding = nn.Embedding(config.seq_len, d)
        layer = nn.TransformerEncoderLayer(
            d,
            config.heads,
            dim_feedforward=4 * d,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        # Nested tensors only help padded batches, and PyTorch rejects them with
        # norm_first; turning them off keeps construction free of warnings.
        self.encoder = nn.TransformerEncoder(
            layer, config.layers, norm=nn.LayerNorm(d), enable_nested_tensor=False
        )
        self.head = nn.Linear(d, config.classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.config.seq_len:
            raise ConfigError(
                f"EncoderClassifier: sequence of {t} tokens exceeds seq_len {self.config.seq_len}."
            )
        positions = torch.arange(t, device=idx.device)
        x = self.token_embedding(idx) + self.position_embedding(positions)  # [B, T, C]
        x = self.encoder(x)  # [B, T, C]
        return self.head(x.mean(dim=1))  # mean-pool over tokens: [B, C] -> [B, classes]


def sequence_batch(batch_size: int, config: EncoderConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random token ids [batch_size, seq_len] and class labels [batch_size]."""
    generator = torch.Generator().manual_seed(0)
    idx = torch.randint(0, config.vocab_size, (batch_size, config.seq_len), generator=generator)
    y = torch.randint(0, config.classes, (batch_size,), generator=generator)
    return idx, y


def _encoder_workload(name: str, config: EncoderConfig, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: EncoderClassifier(config),
        batch=lambda n: sequence_batch(n, config),
        loss=classification_loss,
        batch_size=batch_size,
        tokens_per_sample=config.seq_len,
    )


@register(
    "transformer-encoder",
    "Pre-LN transformer encoder, 6 layers, d=512, 8 heads, 256 tokens, batch 16",
)
def transformer_encoder() -> Workload:
    """6 layers, 8 heads, d=512, 256 tokens, BERT vocab 30522, 2 classes: 34.7 M parameters."""
    return _encoder_workload("transformer-encoder", EncoderConfig(), batch_size=16)


@register(
    "transformer-encoder-tiny",
    "Pre-LN transformer encoder, 2 layers, d=64, 2 heads, 32 tokens, batch 4",
)
def transformer_encoder_tiny() -> Workload:
    """2 layers, 2 heads, d=64, 32 tokens, vocab 1000, 2 classes: 0.17 M parameters."""
    config = EncoderConfig(layers=2, heads=2, d_model=64, seq_len=32, vocab_size=1000)
    return _encoder_workload("transformer-encoder-tiny", config, batch_size=4)
