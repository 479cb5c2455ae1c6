"""Machine translation on synthetic sentence pairs: `transformer-base` and `lstm-seq2seq`.

A batch is `(source, target)`: seeded random token ids, source [B, S] and target
[B, T + 1], fixed lengths and no padding. Training is teacher-forced: the decoder reads
target[:, :-1] and is scored on predicting target[:, 1:], so each sample holds S source
tokens and T predicted target tokens (S = T here; `tokens_per_sample` counts S).

`transformer-base` is the base model of Vaswani et al. 2017, "Attention Is All You
Need": 6 encoder and 6 decoder layers, d_model 512, 8 heads, FFN 2048 with ReLU,
post-LayerNorm sublayers (x = LayerNorm(x + sublayer(x)), §3.1), sinusoidal positions
(§3.5), embeddings scaled by √d_model and shared between source, target and the
pre-softmax projection (§3.4), label-smoothed cross-entropy with ε = 0.1 (§5.4).
Dropout is 0 (the paper's is 0.1) so that steps are deterministic.

Its vocabulary is 41,000 joint BPE tokens, not the "about 37000" of §5.1: with 37,000
the model has 63,082,496 parameters, 3 % under the 65 M of Table 3, and every other
size in Table 3's base family (rows C) comes out 1–4 M low as well. Those sizes vary
N, d_model and d_ff; each fixes the rows of the shared embedding (params − layers) /
d_model, and all eight agree only on 40,931–41,160 rows (tests/suite/
test_language_families.py checks that 41,000 reproduces each printed size). The big
model's 213 M fits neither count (41,000 rows give 218 M, 37,000 give 214 M).

`lstm-seq2seq` is a stacked-LSTM encoder-decoder with Luong et al. 2015 ("Effective
Approaches to Attention-based Neural Machine Translation") global attention, "general"
score h_tᵀ W_a h̄_s, attentional state h̃_t = tanh(W_c [c_t; h_t]) and softmax output
(eqs. 5, 6, 8). Input feeding (§3.3) is left out, so the decoder runs as one fused
LSTM over the whole target rather than a Python loop of cells. Sizes are IWSLT'14
DE-EN scale: 2-layer LSTMs of 512 units with 512-wide embeddings over fairseq's
prepare-iwslt14.sh vocabularies (joint BPE of 10,000 merges: 8,848 German, 6,632
English types); plain cross-entropy.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.errors import ConfigError
from lightspeed.suite import register
from lightspeed.workload import Workload

# --- Transformer ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """The shape of an encoder-decoder Transformer: channels, and sizes in tokens."""

    layers: int = 6  # N, in the encoder and again in the decoder
    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    vocab_size: int = 41_000  # joint source/target BPE; see the module docstring
    source_len: int = 64
    target_len: int = 64
    label_smoothing: float = 0.1

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(
                f"TransformerConfig: d_model {self.d_model} must be a multiple of heads"
                f" {self.heads}."
            )


class MultiHeadAttention(nn.Module):
    """Queries x [B, Lq, C] attend to a memory [B, Lk, C] over `heads` heads -> [B, Lq, C].

    Self-attention passes x as its own memory; `causal` lets query i see keys <= i.
    """

    def __init__(self, d_model: int, heads: int, *, causal: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.query = nn.Linear(d_model, d_model)
        # keys and values in one matmul: [B, Lk, C] -> [B, Lk, 2C]
        self.key_value = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        b, lq, c = x.shape
        k, v = self.key_value(memory).split(c, dim=2)
        # [B, L, C] -> [B, heads, L, C / heads]: SDPA attends over the last two dims and
        # scales the scores by 1/√(C / heads), the paper's 1/√d_k.
        q, k, v = (
            z.unflatten(2, (self.heads, c // self.heads)).transpose(1, 2)
            for z in (self.query(x), k, v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, lq, c))


def feed_forward(d_model: int, d_ff: int) -> nn.Sequential:
    """The position-wise FFN, max(0, x W1 + b1) W2 + b2 (§3.3): [B, L, C] -> [B, L, C]."""
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each x = LayerNorm(x + sublayer(x)): [B, S, C] -> [B, S, C]."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.self_attn = MultiHeadAttention(d, config.heads)
        self.ln_self = nn.LayerNorm(d)
        self.ffn = feed_forward(d, config.d_ff)
        self.ln_ffn = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_self(x + self.self_attn(x, x))
        return self.ln_ffn(x + self.ffn(x))


class DecoderLayer(nn.Module):
    """Causal self-attention, attention to the encoder output, FFN; post-LN after each.

    y [B, T, C] and memory [B, S, C] -> [B, T, C].
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.self_attn = MultiHeadAttention(d, config.heads, causal=True)
        self.ln_self = nn.LayerNorm(d)
        self.cross_attn = MultiHeadAttention(d, config.heads)
        self.ln_cross = nn.LayerNorm(d)
        self.ffn = feed_forward(d, config.d_ff)
        self.ln_ffn = nn.LayerNorm(d)

    def forward(self, y: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        y = self.ln_self(y + self.self_attn(y, y))
        y = self.ln_cross(y + self.cross_attn(y, memory))
        return self.ln_ffn(y + self.ffn(y))


def sinusoids(length: int, d_model: int) -> torch.Tensor:
    """Positional encodings [length, d_model] of §3.5: sin(pos / 10000^(2i / d_model)) in
    channel 2i, cos of the same angle in channel 2i + 1."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # [L, 1]
    inverse_wavelength = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )  # [C / 2]
    angle = position * inverse_wavelength  # [L, C / 2]
    return torch.stack((angle.sin(), angle.cos()), dim=2).flatten(1)  # interleave: [L, C]


class Transformer(nn.Module):
    """Source ids [B, S] and target ids [B, T] -> next-token logits [B, T, vocab_size]."""

    positions: torch.Tensor  # sinusoids [max(S, T), C], a buffer: not learned

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embedding = nn.Embedding(config.vocab_size, d)
        # With the √d_model scale the embedded tokens start at unit variance, as the
        # sinusoids are (fairseq initialises shared embeddings the same way).
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d**-0.5)
        length = max(config.source_len, config.target_len)
        self.register_buffer("positions", sinusoids(length, d), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.decoder = nn.ModuleList(DecoderLayer(config) for _ in range(config.layers))
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        self.lm_head.weight = self.embedding.weight  # the third use of the one matrix

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids [B, L] -> √d_model · embedding + sinusoid [B, L, C]."""
        length = idx.shape[1]
        if length > self.positions.shape[0]:
            raise ConfigError(
                f"Transformer: sequence of {length} tokens exceeds the"
                f" {self.positions.shape[0]} positions it was built for."
            )
        return self.embedding(idx) * math.sqrt(self.config.d_model) + self.positions[:length]

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        memory = self.embed(source)  # [B, S, C]
        for encoder_layer in self.encoder:
            memory = encoder_layer(memory)
        y = self.embed(target)  # [B, T, C]
        for decoder_layer in self.decoder:
            y = decoder_layer(y, memory)
        return self.lm_head(y)


# --- LSTM encoder-decoder ------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class LSTMSeq2SeqConfig:
    """The shape of the LSTM encoder-decoder: channels, and sizes in tokens."""

    layers: int = 2  # in the encoder and again in the decoder
    embed_dim: int = 512
    hidden: int = 512
    source_vocab: int = 8_848  # IWSLT'14 German, fairseq prepare-iwslt14.sh
    target_vocab: int = 6_632  # IWSLT'14 English
    source_len: int = 32
    target_len: int = 32


class LSTMSeq2Seq(nn.Module):
    """Source ids [B, S] and target ids [B, T] -> next-token logits [B, T, target_vocab]."""

    def __init__(self, config: LSTMSeq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        e, h = config.embed_dim, config.hidden
        self.source_embedding = nn.Embedding(config.source_vocab, e)
        self.target_embedding = nn.Embedding(config.target_vocab, e)
        self.encoder = nn.LSTM(e, h, config.layers, batch_first=True)
        self.decoder = nn.LSTM(e, h, config.layers, batch_first=True)
        self.score = nn.Linear(h, h, bias=False)  # W_a of the "general" score
        self.combine = nn.Linear(2 * h, h, bias=False)  # W_c
        self.lm_head = nn.Linear(h, config.target_vocab)  # W_s

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        memory, state = self.encoder(self.source_embedding(source))  # h̄_s: [B, S, H]
        # The decoder starts from the encoder's last (h, c) in every layer.
        h, _ = self.decoder(self.target_embedding(target), state)  # h_t: [B, T, H]
        scores = torch.bmm(self.score(h), memory.transpose(1, 2))  # [B, T, S]
        context = torch.bmm(scores.softmax(dim=2), memory)  # c_t: [B, T, H]
        attentional = torch.tanh(self.combine(torch.cat((context, h), dim=2)))  # h̃_t
        return self.lm_head(attentional)


# --- batches, loss, workloads --------------------------------------------------------


def sentence_pairs(
    batch_size: int, source_len: int, target_len: int, source_vocab: int, target_vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random ids: source [batch_size, source_len], target [batch_size, target_len + 1]."""
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(0, source_vocab, (batch_size, source_len), generator=generator)
    target = torch.randint(0, target_vocab, (batch_size, target_len + 1), generator=generator)
    return source, target


def translation_forward(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Next-token logits [B, T, vocab] of the decoder teacher-forced on target[:, :-1]
    over the encoded source: the training forward without the loss, one pass where
    decoding would take one per generated token."""
    source, target = batch
    return model(source, target[:, :-1])


def translation_loss(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], *, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy in nats per target token, teacher-forced, label-smoothed by ε."""
    _, target = batch
    logits = translation_forward(model, batch)  # [B, T, vocab]
    return F.cross_entropy(
        logits.flatten(0, 1), target[:, 1:].flatten(), label_smoothing=label_smoothing
    )


def _transformer_workload(name: str, config: TransformerConfig, batch_size: int) -> Workload:
    vocab = config.vocab_size
    return Workload(
        name=name,
        model=lambda: Transformer(config),
        batch=lambda n: sentence_pairs(n, config.source_len, config.target_len, vocab, vocab),
        loss=functools.partial(translation_loss, label_smoothing=config.label_smoothing),
        batch_size=batch_size,
        tokens_per_sample=config.source_len,
        # The model reads the decoder's inputs beside the source (see translation_forward).
        forward=translation_forward,
    )


def _lstm_workload(name: str, config: LSTMSeq2SeqConfig, batch_size: int) -> Workload:
    c = config
    return Workload(
        name=name,
        model=lambda: LSTMSeq2Seq(c),
        batch=lambda n: sentence_pairs(
            n, c.source_len, c.target_len, c.source_vocab, c.target_vocab
        ),
        loss=translation_loss,
        batch_size=batch_size,
        tokens_per_sample=c.source_len,
        forward=translation_forward,  # as the Transformer's: source and decoder inputs
    )


@register(
    "transformer-base",
    "Transformer base (Vaswani 2017), 6+6 layers, d=512, 64+64 synthetic tokens, batch 48",
)
def transformer_base() -> Workload:
    """6+6 layers, 8 heads, d=512, FFN 2048, shared vocab 41,000: 65,130,496 parameters.

    Batch 48 × 64 source tokens = 3,072 tokens a side, about one GPU's share of the
    paper's 25,000-token batches split over 8 GPUs (§5.1, §5.2).
    """
    return _transformer_workload("transformer-base", TransformerConfig(), batch_size=48)


@register(
    "transformer-base-tiny",
    "Transformer base shape, 2+2 layers, d=64, 16+16 synthetic tokens, vocab 1000, batch 4",
)
def transformer_base_tiny() -> Workload:
    """2+2 layers, 2 heads, d=64, FFN 256, shared vocab 1000, 16 tokens a side."""
    config = TransformerConfig(
        layers=2, d_model=64, heads=2, d_ff=256, vocab_size=1000, source_len=16, target_len=16
    )
    return _transformer_workload("transformer-base-tiny", config, batch_size=4)


@register(
    "lstm-seq2seq",
    "LSTM encoder-decoder with Luong attention, 2+2 layers of 512, IWSLT'14 vocab, batch 128",
)
def lstm_seq2seq() -> Workload:
    """2+2 LSTM layers of 512, 512-wide embeddings, vocab 8,848 -> 6,632, 32 tokens a side.

    Batch 128 × 32 = 4,096 source tokens, the --max-tokens 4096 of fairseq's IWSLT'14
    DE-EN recipe; IWSLT'14 training sentences average 25 BPE tokens.
    """
    return _lstm_workload("lstm-seq2seq", LSTMSeq2SeqConfig(), batch_size=128)


@register(
    "lstm-seq2seq-tiny",
    "LSTM encoder-decoder with Luong attention, 2+2 layers of 64, 16+16 tokens, batch 4",
)
def lstm_seq2seq_tiny() -> Workload:
    """2+2 LSTM layers of 64, 64-wide embeddings, vocab 500 -> 400, 16 tokens a side."""
    config = LSTMSeq2SeqConfig(
        embed_dim=64, hidden=64, source_vocab=500, target_vocab=400, source_len=16, target_len=16
    )
    return _lstm_workload("lstm-seq2seq-tiny", config, batch_size=4)
