"""Shape padding for mixed precision: the layer sizes tensor cores cannot fully use.

A matrix product in fp16 or bf16 runs at full tensor-core speed only when its
dimensions are multiples of 8 elements (16 bytes; `rules.TENSOR_CORE_MULTIPLE` holds the
multiple of each precision). The dimensions a model fixes are its layer sizes: a Linear's
in and out features, a convolution's channels per group (the K and N of its implicit
GEMM), an embedding's vocabulary (the N of a tied output head) and width, an attention's
embed_dim, a recurrent layer's input and hidden sizes. `padding_suggestions` reads them
from the module tree and names each one off the multiple, with the size to pad it to.

Sources:
- NVIDIA Deep Learning Performance, "Matrix Multiplication Background User's Guide",
  §"Tensor Core Requirements": M, N, K multiples of 8 for fp16 (16 bytes), 64 or more
  lets cuBLAS tile efficiently; "Linear/Fully-Connected Layers" and "Recurrent Layers"
  guides: the same for in/out features, input and hidden sizes, and the vocabulary.
- NVIDIA Deep Learning Performance, "Convolutional Layers User's Guide", "Channels In
  And Out": input and output channels divisible by 8 (fp16) or 4 (tf32); for a first
  layer on 3-channel images, padding to 4 channels is enough.
- Intel AMX (Intel 64 and IA-32 Architectures Optimization Reference Manual, "Intel
  AMX"): a tile row holds 64 bytes, 32 bf16 elements, and a tile 16 rows, so bf16
  products on AMX prefer multiples of 16 or 32: pass `multiple=32` for them.

The data rule: a size of at most `DATA_WIDTH` (4) elements is taken for the data's or the
task's, not a layer size the model chose, and is not reported: an input's channels or
features (1 grayscale channel or mono audio, 3 RGB or xyz, 4 RGBA or RGB-D), an output
of one score, two classes or three colour channels, a vocabulary of two segment types.
Padding those means padding the data or the labels, the layers they touch are among the
smallest of the model, and NVIDIA's convolution guide finds 4 channels enough for a
first layer on images. The module tree does not say which layer reads the batch, so the
rule goes by size alone and applies to every dimension alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

from torch import nn

from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.rules import TENSOR_CORE_MULTIPLE

# Sizes up to this many elements are the data's or the task's (see the module docstring).
DATA_WIDTH = 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class PadSuggestion:
    """One layer size to round up to a multiple, in elements.

    `module`: the module's qualified name in the model ("" for the model itself);
    `kind`: its class name; `dimension`: its constructor argument to change
    ("out_features", "num_embeddings", "in_channels", …); `size`: its value now;
    `padded`: the value to give it, the smallest with `size / groups` rounded up to a
    multiple of `multiple` (`groups` > 1 only for a grouped convolution's channels,
    which are padded group by group); `excess`: padded / size − 1, the layer's extra
    multiply-adds (for an embedding, extra rows) as a fraction of what it does now.
    """

    module: str
    kind: str
    dimension: str
    size: int
    padded: int
    multiple: int
    groups: int = 1
    excess: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "excess", self.padded / self.size - 1)

    @property
    def text(self) -> str:
        """One line: "lm_head.out_features 50257 → 50264 (+0.01 % work)"."""
        where = f"{self.module or self.kind}.{self.dimension}"
        work = f"+{100 * self.excess:.2f} % work"
        if self.groups > 1:
            per_group = f"{self.size // self.groups} → {self.padded // self.groups}"
            work = f"{self.groups} groups of {per_group}, {work}"
        return f"{where} {self.size} → {self.padded} ({work})"


@dataclasses.dataclass(frozen=True)
class _Dim:
    """A layer size as its constructor names it, split into `groups` matrix products."""

    name: str
    size: int
    groups: int = 1


def _linear(m: nn.Linear) -> list[_Dim]:
    return [_Dim("in_features", m.in_features), _Dim("out_features", m.out_features)]


def _embedding(m: nn.Embedding) -> list[_Dim]:
    return [_Dim("num_embeddings", m.num_embeddings), _Dim("embedding_dim", m.embedding_dim)]


def _conv(m: nn.modules.conv._ConvNd) -> list[_Dim]:
    # Each group is its own implicit GEMM over in_channels / groups input channels; a
    # depthwise convolution (one input channel a group) is no matrix product at all.
    if m.groups > 1 and m.in_channels == m.groups:
        return []
    return [
        _Dim("in_channels", m.in_channels, m.groups),
        _Dim("out_channels", m.out_channels, m.groups),
    ]


def _attention(m: nn.MultiheadAttention) -> list[_Dim]:
    return [_Dim("embed_dim", m.embed_dim)]


def _recurrent(m: nn.RNNBase) -> list[_Dim]:
    dims = [_Dim("input_size", m.input_size), _Dim("hidden_size", m.hidden_size)]
    if m.proj_size:
        dims.append(_Dim("proj_size", m.proj_size))
    return dims


_CONVOLUTIONS = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)
# The layers whose sizes are matrix-product dimensions, and how to read them.
_READERS: tuple[tuple[type | tuple[type, ...], Callable[..., list[_Dim]]], ...] = (
    (nn.Linear, _linear),
    (nn.Embedding, _embedding),
    (_CONVOLUTIONS, _conv),
    (nn.MultiheadAttention, _attention),
    (nn.RNNBase, _recurrent),
)


def _dims(module: nn.Module) -> list[_Dim]:
    for types, read in _READERS:
        if isinstance(module, types):
            return read(module)
    return []


def _tensor_core_multiple(precision: Precision | str) -> int:
    """The multiple, in elements, that `precision`'s matrix products need their
    dimensions in (8 for fp16 and bf16); ConfigError when it runs on no tensor cores."""
    name = precision.value if isinstance(precision, Precision) else precision
    p = Precision.parse(name, "precision")
    multiple = TENSOR_CORE_MULTIPLE.get(p)
    if multiple is None:
        allowed = ", ".join(q.value for q in TENSOR_CORE_MULTIPLE)
        raise ConfigError(
            f"padding_suggestions: {p.value} runs on no tensor cores, so no shape needs"
            f" padding for it; choose one of {allowed}, or pass multiple= (in elements)."
        )
    return multiple


def padding_suggestions(
    model: nn.Module, precision: Precision | str, *, multiple: int | None = None
) -> list[PadSuggestion]:
    """The layer sizes of `model` that are not a multiple of `multiple` elements, each
    with the size to pad it to, in module order (`model.named_modules()`: registration
    order, parents first) and in constructor order within a module.

    `multiple` defaults to the tensor-core multiple of `precision` (8 for fp16 and bf16,
    `rules.TENSOR_CORE_MULTIPLE`); pass 64 for cuBLAS's larger tiles or 32 for Intel AMX
    bf16 tiles. Read: nn.Linear (in_features, out_features), nn.Embedding
    (num_embeddings, embedding_dim), convolutions and transposed convolutions
    (in_channels and out_channels, checked per group; depthwise ones skipped),
    nn.MultiheadAttention (embed_dim; its out_proj is that same size and not reported
    again) and nn.RNN/LSTM/GRU (input_size, hidden_size, proj_size). Sizes of at most
    DATA_WIDTH elements are the data's, not reported (see the module docstring). A
    module reached under two names is reported once, under its first; two modules that
    share a weight (a tied LM head and embedding) are each reported, and so is a width
    one layer writes and the next reads, at both (they are padded together).
    """
    if multiple is None:
        multiple = _tensor_core_multiple(precision)
    elif multiple < 1:
        raise ConfigError(
            f"padding_suggestions: multiple={multiple} must be a positive number of elements."
        )
    return list(_suggestions(model, multiple))


def _suggestions(model: nn.Module, multiple: int) -> Iterator[PadSuggestion]:
    # An attention's out_proj is an embed_dim × embed_dim Linear: its embed_dim says it.
    covered = {id(m.out_proj) for m in model.modules() if isinstance(m, nn.MultiheadAttention)}
    for name, module in model.named_modules():
        if id(module) in covered:
            continue
        for dim in _dims(module):
            if dim.size <= DATA_WIDTH:
                continue
            per_group = dim.size // dim.groups
            if per_group % multiple == 0:
                continue
            yield PadSuggestion(
                module=name,
                kind=type(module).__name__,
                dimension=dim.name,
                size=dim.size,
                padded=dim.groups * math.ceil(per_group / multiple) * multiple,
                multiple=multiple,
                groups=dim.groups,
            )
