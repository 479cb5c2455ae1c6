"""Models from third-party libraries, built from their configurations (nothing is
downloaded), as lightspeed Workloads: checks on models the suite does not hold.

Needs Hugging Face `transformers` beside torch 2.13.0, in the benchmarks' own venv:

    .bench-venv/bin/pip install -c constraints.txt torch==2.13.0 transformers typer rich numpy
"""

from __future__ import annotations

from typing import Any

import torch

from lightspeed.workload import Workload

BERT_SEQ_LEN = 128


def bert_base_mlm(batch_size: int = 1) -> Workload:
    """BERT-base (Devlin et al. 2019; 110 M parameters in the encoder, 12 layers, d=768,
    12 heads) with its masked-LM head, from `transformers.BertConfig()` defaults and a
    random initialisation; synthetic 128-token batches; AdamW; fp32 unless cast."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig()

    def model() -> torch.nn.Module:
        return BertForMaskedLM(config)

    def batch(size: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, config.vocab_size, (size, BERT_SEQ_LEN), generator=generator)
        return {"input_ids": ids, "labels": ids.clone()}

    def loss(m: torch.nn.Module, b: Any) -> torch.Tensor:
        out: torch.Tensor = m(**b).loss
        return out

    return Workload(
        name="bert-base-mlm (transformers)",
        model=model,
        batch=batch,
        loss=loss,
        batch_size=batch_size,
        tokens_per_sample=BERT_SEQ_LEN,
    )


# --- models outside the suite, for the batch-size what-ifs (benchmarks/predict_outside.py) --
# Small configurations of `transformers` architectures as the `hf:` targets build them
# (`lightspeed.workload.hf`), and hand-written networks of kinds the suite does not hold.

HF_OUTSIDE = {
    # The two the batch-size rule was examined on.
    "bert-4x256": "hf:bert?num_hidden_layers=4&hidden_size=256&num_attention_heads=4"
    "&intermediate_size=1024&seq_len=128&batch_size=2",
    # Held out: only run once the rule's constants were frozen.
    "gpt2-4x256": "hf:gpt2?n_layer=4&n_embd=256&n_head=4&seq_len=128&batch_size=2",
    "t5-2x256": "hf:t5?num_layers=2&num_decoder_layers=2&d_model=256&d_ff=1024&num_heads=4"
    "&d_kv=64&seq_len=128&batch_size=2",
    "llama-4x256": "hf:llama?num_hidden_layers=4&hidden_size=256&num_attention_heads=4"
    "&num_key_value_heads=4&intermediate_size=688&seq_len=128&batch_size=2",
}


def _images(
    size: int, classes: int, label_shape: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random 64×64 RGB images and their labels, each of `label_shape`."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(size, 3, 64, 64, generator=generator)
    return images, torch.randint(0, classes, (size, *label_shape), generator=generator)


def _image_loss(m: torch.nn.Module, b: Any) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(m(b[0]), b[1])


class _ConvPair(torch.nn.Module):
    """Two 3×3 convolutions, each with batch norm and ReLU (a U-Net level)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Conv2d(c_in, c_out, 3, padding=1),
            torch.nn.BatchNorm2d(c_out),
            torch.nn.ReLU(),
            torch.nn.Conv2d(c_out, c_out, 3, padding=1),
            torch.nn.BatchNorm2d(c_out),
            torch.nn.ReLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layers(x)
        return out


class UNet(torch.nn.Module):
    """A three-level U-Net (Ronneberger et al. 2015) for 2-class segmentation: 64×64
    RGB in, a class score per pixel out; widths `width`, 2×, 4×."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        c = width
        self.down1, self.down2, self.down3 = (
            _ConvPair(3, c),
            _ConvPair(c, 2 * c),
            _ConvPair(2 * c, 4 * c),
        )
        self.up2 = torch.nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.up1 = torch.nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.merge2, self.merge1 = _ConvPair(4 * c, 2 * c), _ConvPair(2 * c, c)
        self.head = torch.nn.Conv2d(c, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.down1(x)  # (B, c, 64, 64)
        b = self.down2(torch.nn.functional.max_pool2d(a, 2))  # (B, 2c, 32, 32)
        c = self.down3(torch.nn.functional.max_pool2d(b, 2))  # (B, 4c, 16, 16)
        b = self.merge2(torch.cat([self.up2(c), b], 1))
        a = self.merge1(torch.cat([self.up1(b), a], 1))
        out: torch.Tensor = self.head(a)  # (B, 2, 64, 64)
        return out


def unet(batch_size: int = 8) -> Workload:
    """`UNet` on seeded random 64×64 images and masks; cross-entropy per pixel; AdamW."""

    def batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _images(size, classes=2, label_shape=(64, 64))  # a class per pixel

    return Workload(
        name="unet (hand-written)", model=UNet, batch=batch, loss=_image_loss, batch_size=batch_size
    )


LSTM_VOCAB, LSTM_SEQ_LEN = 10_000, 64


class LSTMLanguageModel(torch.nn.Module):
    """A word-level LSTM language model (Zaremba et al. 2014's shape, smaller): embedding
    of 256, two LSTM layers of 256, a tied-size softmax over `LSTM_VOCAB` words."""

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(LSTM_VOCAB, width)
        self.lstm = torch.nn.LSTM(width, width, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(width, LSTM_VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(ids))  # (B, T, width)
        out: torch.Tensor = self.out(hidden)  # (B, T, vocab)
        return out


def lstm_lm(batch_size: int = 4) -> Workload:
    """`LSTMLanguageModel` on seeded random 64-word sequences, next-word loss; AdamW."""

    def batch(size: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(0)
        return torch.randint(0, LSTM_VOCAB, (size, LSTM_SEQ_LEN + 1), generator=generator)

    def loss(m: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        logits = m(ids[:, :-1])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    return Workload(
        name="lstm-lm (hand-written)",
        model=LSTMLanguageModel,
        batch=batch,
        loss=loss,
        batch_size=batch_size,
        tokens_per_sample=LSTM_SEQ_LEN,
    )


class _ConvNeXtBlock(torch.nn.Module):
    """ConvNeXt's block (Liu et al. 2022): 7×7 depthwise convolution, LayerNorm over
    channels, a 4× pointwise MLP with GELU, layer scale, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.depthwise = torch.nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)
        self.scale = torch.nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(x).permute(0, 2, 3, 1)  # (B, H, W, C)
        y = self.down(torch.nn.functional.gelu(self.up(self.norm(y))))
        return x + (self.scale * y).permute(0, 3, 1, 2)


class ConvNeXtSmall(torch.nn.Module):
    """A two-stage ConvNeXt-style classifier for 64×64 images: 4×4 patchify stem to
    `dim`, two blocks, a 2×2 downsampling to 2·`dim`, two blocks, pooled head."""

    def __init__(self, dim: int = 48, classes: int = 100) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, dim, 4, stride=4)
        self.stage1 = torch.nn.Sequential(_ConvNeXtBlock(dim), _ConvNeXtBlock(dim))
        self.down = torch.nn.Conv2d(dim, 2 * dim, 2, stride=2)
        self.stage2 = torch.nn.Sequential(_ConvNeXtBlock(2 * dim), _ConvNeXtBlock(2 * dim))
        self.head = torch.nn.Linear(2 * dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.down(self.stage1(self.stem(x))))  # (B, 2·dim, 8, 8)
        out: torch.Tensor = self.head(x.mean((2, 3)))
        return out


def convnext_small(batch_size: int = 8) -> Workload:
    """`ConvNeXtSmall` on seeded random 64×64 images, 100 classes; AdamW."""

    def batch(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _images(size, classes=100, label_shape=())

    return Workload(
        name="convnext-small (hand-written)",
        model=ConvNeXtSmall,
        batch=batch,
        loss=_image_loss,
        batch_size=batch_size,
    )


def outside_workload(name: str) -> Workload:
    """One of the models outside the suite by its short name (`OUTSIDE`)."""
    if name in HF_OUTSIDE:
        from lightspeed.workload.hf import hf_workload

        return hf_workload(HF_OUTSIDE[name])
    return {"unet": unet, "lstm-lm": lstm_lm, "convnext-small": convnext_small}[name]()


# The models the batch-size rule was examined on, and those it is validated on after.
EXAMINED = ("bert-4x256", "unet")
VALIDATION = ("gpt2-4x256", "t5-2x256", "llama-4x256", "lstm-lm", "convnext-small")
