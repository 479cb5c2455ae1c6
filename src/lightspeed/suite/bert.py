"""`bert-base` and `bert-base-tiny`: a BERT pre-training step on synthetic sentences.

The model is BERT of Devlin et al. 2019 ("BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding"): word + position + segment embeddings with
LayerNorm, post-LayerNorm encoder layers (GELU FFN 4x wide), the tanh pooler on the
[CLS] token, and the pre-training heads: the masked-LM head (dense + GELU + LayerNorm,
then a decoder tied to the word embeddings plus a per-token bias) and the next-sentence
head on the pooler. The loss is their sum, as in BERT's pre-training (§3.1, A.1); the
NSP head is also what gives the pooler a gradient. LayerNorm eps is 1e-12 as in BERT;
dropout is 0 (BERT's is 0.1) so that steps are deterministic. At the base shape the
embeddings, encoder and pooler (`Bert.bert`) hold 109,482,240 parameters, Hugging Face
BertModel's count; the heads add 624,188.

Sequences are 128 tokens: BERT pre-trains 90 % of its steps at 128 and only the last
10 % at 512 (Appendix A.2). A sample is `[CLS] A [SEP] B [SEP]` with segment A the
first half. Masking follows the reference create_pretraining_data.py, made exact rather
than drawn: round(15 % × 128) = 19 positions per sequence, chosen by a seeded
permutation of the non-special positions; the first round(80 %) of them (15) become
[MASK], half of the rest (2) a random token, the others (2) stay as they are.

The batch is `(input_ids [B, T], labels [B, T])`. labels[:, 1:] are the masked-LM
targets, −100 where no prediction is scored (Hugging Face's convention); labels[:, 0],
the [CLS] slot that the masked LM never predicts, holds the next-sentence label (0:
B follows A, 1: B is random). The masked-LM head runs on all T positions and the loss
ignores the unscored ones, as Hugging Face's BertForPreTraining does; Google's
TensorFlow code gathers the masked positions first.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.errors import ConfigError
from lightspeed.suite import register
from lightspeed.workload import Workload

IGNORE = -100  # label of a position the masked LM does not score
MASK_PROB = 0.15

# BERT's uncased WordPiece vocabulary puts its special tokens at these ids.
CLS, SEP, MASK = 101, 102, 103


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertConfig:
    """The shape of BERT: channels, and sizes in tokens (`seq_len`, `max_positions`)."""

    layers: int = 12
    d_model: int = 768
    heads: int = 12
    d_ff: int = 3072
    vocab_size: int = 30522
    max_positions: int = 512
    type_vocab_size: int = 2
    seq_len: int = 128

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ConfigError(
                f"BertConfig: d_model {self.d_model} must be a multiple of heads {self.heads}."
            )
        if self.seq_len > self.max_positions:
            raise ConfigError(
                f"BertConfig: seq_len {self.seq_len} exceeds max_positions {self.max_positions}."
            )
        if self.vocab_size <= MASK:
            raise ConfigError(
                f"BertConfig: vocab_size {self.vocab_size} must exceed the [MASK] id {MASK}."
            )


def _layer_norm(d_model: int) -> nn.LayerNorm:
    return nn.LayerNorm(d_model, eps=1e-12)


class Layer(nn.Module):
    """Self-attention then FFN, each x = LayerNorm(x + sublayer(x)): [B, T, C] -> [B, T, C]."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d = config.d_model
        self.heads = config.heads
        self.qkv = nn.Linear(d, 3 * d)  # BERT's query, key, value in one matmul
        self.attn_out = nn.Linear(d, d)
        self.ln_attn = _layer_norm(d)
        self.ffn = nn.Sequential(nn.Linear(d, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, d))
        self.ln_ffn = _layer_norm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        # [B, T, 3C] -> q, k, v of [B, heads, T, C / heads]; no mask: no padding.
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        x = self.ln_attn(x + self.attn_out(y.transpose(1, 2).reshape(b, t, c)))
        return self.ln_ffn(x + self.ffn(x))


class BertModel(nn.Module):
    """Ids and segment ids [B, T] -> hidden states [B, T, C] and pooled [CLS] state [B, C]."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d = config.d_model
        self.word_embedding = nn.Embedding(config.vocab_size, d)
        self.position_embedding = nn.Embedding(config.max_positions, d)
        self.segment_embedding = nn.Embedding(config.type_vocab_size, d)
        self.ln_embedding = _layer_norm(d)
        self.layers = nn.Sequential(*(Layer(config) for _ in range(config.layers)))
        self.pooler = nn.Linear(d, d)

    def forward(
        self, idx: torch.Tensor, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.word_embedding(idx) + self.position_embedding(positions)
        x = self.ln_embedding(x + self.segment_embedding(segments))  # [B, T, C]
        x = self.layers(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


class Bert(nn.Module):
    """BertModel with the pre-training heads: ids and segment ids [B, T] -> masked-LM
    logits [B, T, vocab_size] and next-sentence logits [B, 2]."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d = config.d_model
        self.bert = BertModel(config)
        self.mlm_transform = nn.Sequential(nn.Linear(d, d), nn.GELU(), _layer_norm(d))
        self.mlm_decoder = nn.Linear(d, config.vocab_size)
        self.mlm_decoder.weight = self.bert.word_embedding.weight  # tied; the bias is its own
        self.nsp_head = nn.Linear(d, 2)
        self.apply(_init_weights)

    def forward(
        self, idx: torch.Tensor, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, pooled = self.bert(idx, segments)
        return self.mlm_decoder(self.mlm_transform(hidden)), self.nsp_head(pooled)


def _init_weights(module: nn.Module) -> None:
    # BERT's init: N(0, 0.02) for every matrix and embedding, zero biases.
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def segment_ids(batch_size: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """Segment ids [batch_size, seq_len]: 0 for [CLS] A [SEP] (the first half), 1 after."""
    return (torch.arange(seq_len, device=device) >= seq_len // 2).long().expand(batch_size, -1)


def pretraining_batch(batch_size: int, config: BertConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random sentence pairs with BERT's masking: input_ids and labels [B, T]."""
    t = config.seq_len
    generator = torch.Generator().manual_seed(0)
    # Ordinary tokens come after the special ones, as in BERT's WordPiece vocabulary.
    original = torch.randint(MASK + 1, config.vocab_size, (batch_size, t), generator=generator)
    special = [0, t // 2 - 1, t - 1]  # [CLS] A [SEP] B [SEP]
    original[:, special] = torch.tensor([CLS, SEP, SEP])
    candidates = torch.tensor([p for p in range(t) if p not in special])

    predicted = round(MASK_PROB * t)
    masked = round(0.8 * predicted)
    randomised = (predicted - masked) // 2
    chosen = torch.stack(
        [
            candidates[torch.randperm(len(candidates), generator=generator)[:predicted]]
            for _ in range(batch_size)
        ]
    )  # [B, predicted], in permutation order
    rows = torch.arange(batch_size).unsqueeze(1)
    idx = original.clone()
    idx[rows, chosen[:, :masked]] = MASK
    random_tokens = torch.randint(
        MASK + 1, config.vocab_size, (batch_size, randomised), generator=generator
    )
    idx[rows, chosen[:, masked : masked + randomised]] = random_tokens
    # chosen[:, masked + randomised:] keep their token but are still scored.

    labels = torch.full_like(original, IGNORE)
    labels[rows, chosen] = original[rows, chosen]
    labels[:, 0] = torch.randint(0, 2, (batch_size,), generator=generator)  # next sentence?
    return idx, labels


def pretraining_forward(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT with its pre-training heads on the batch's sentences and their segment ids:
    masked-LM logits [B, T, vocab_size] and next-sentence logits [B, 2]."""
    idx, _ = batch  # the labels are only scored
    return model(idx, segment_ids(idx.shape[0], idx.shape[1], idx.device))


def pretraining_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Masked-LM cross-entropy (mean over the scored positions) + next-sentence
    cross-entropy (mean over the batch), in nats."""
    _, labels = batch
    mlm_logits, nsp_logits = pretraining_forward(model, batch)  # [B, T, vocab], [B, 2]
    mlm_labels = labels.clone()
    mlm_labels[:, 0] = IGNORE  # the [CLS] slot holds the next-sentence label
    mlm = F.cross_entropy(mlm_logits.flatten(0, 1), mlm_labels.flatten(), ignore_index=IGNORE)
    return mlm + F.cross_entropy(nsp_logits, labels[:, 0])


def _bert_workload(name: str, config: BertConfig, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: Bert(config),
        batch=lambda n: pretraining_batch(n, config),
        loss=pretraining_loss,
        batch_size=batch_size,
        tokens_per_sample=config.seq_len,
        # Bert takes the segment ids beside the tokens, which the batch does not carry.
        forward=pretraining_forward,
    )


@register(
    "bert-base",
    "BERT base pre-training (masked LM + NSP), 12 layers, d=768, 128 synthetic tokens, batch 32",
)
def bert_base() -> Workload:
    """12 layers, 12 heads, d=768, FFN 3072, vocab 30522, 128 tokens: 110,106,428 parameters."""
    return _bert_workload("bert-base", BertConfig(), batch_size=32)


@register(
    "bert-base-tiny",
    "BERT base shape, 2 layers, d=64, 32 synthetic tokens, vocab 1000, batch 4",
)
def bert_base_tiny() -> Workload:
    """2 layers, 2 heads, d=64, FFN 256, vocab 1000, 64 positions, 32 tokens."""
    config = BertConfig(
        layers=2, d_model=64, heads=2, d_ff=256, vocab_size=1000, max_positions=64, seq_len=32
    )
    return _bert_workload("bert-base-tiny", config, batch_size=4)
