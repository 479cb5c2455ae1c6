"""Memory-saving encodings of the activations a step keeps for backward: `Workload →
Workload` that swaps ReLU, ReLU6, LeakyReLU and max-pooling modules for ones that keep
less.

Source: Jain et al. 2018, "Gist: Efficient Data Encoding for Deep Neural Network
Training" (ISCA), its lossless encodings. A ReLU's backward needs only where its input
was positive: one bit an element (packed eight to a byte) instead of the 4 bytes of the
fp32 output PyTorch keeps. A max-pool's backward needs only which element of each window
was the largest: its place in the window, one byte an output element, instead of the
whole input and 8-byte indices. ReLU6 and LeakyReLU alike keep one bit (ReLU6: whether
the input lay strictly between 0 and 6; LeakyReLU, whether it was positive).

Where it helps: an encoding frees a tensor only when nothing else keeps it. A ReLU
feeding a max-pool (VGG-style blocks) frees the ReLU's output, which neither now keeps;
a ReLU feeding a convolution or a linear layer frees nothing, because that layer keeps
its input — the ReLU's output — for its own backward. `gist_report` measures, module by
module on fake tensors, which swaps save memory and which cannot.

Equivalence: lossless. Each backward computes what PyTorch's own computes from the same
information, elementwise in the same order, so gradients are bit-equal (tests).
Preconditions: the activations are modules (`nn.ReLU`, …), not `F.relu` calls in a
forward, which a module swap cannot reach; max-pooling in 2-D with window sizes up to
256 elements. In-place activations run out of place (their input is not overwritten).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lightspeed.errors import ConfigError
from lightspeed.workload import Workload

__all__ = ["GIST_MODULES", "GistLeakyReLU", "GistMaxPool2d", "GistReLU", "GistReLU6", "gist"]


def gist(workload: Workload, modules: Sequence[str] | None = None) -> Workload:
    """`workload` with the `nn.ReLU`, `nn.ReLU6`, `nn.LeakyReLU` and `nn.MaxPool2d`
    modules of its model swapped for their Gist encodings (see the module's docstring);
    named `"<name>+gist"`. `modules`: the fully-qualified names to encode (None: every
    one; `predict.encodings.gist_savings(…).helpful`: those that save memory). Raises
    ConfigError, when the model is built, if it has none, or a name is not one."""

    def model() -> nn.Module:
        built = workload.model()
        found = candidates(built)
        if not found:
            raise ConfigError(
                f"gist: {type(built).__name__} has no nn.ReLU, ReLU6, LeakyReLU or MaxPool2d"
                " module to encode (activations called as functions cannot be swapped)."
            )
        unknown = sorted(set(modules or ()) - set(found))
        if unknown:
            raise ConfigError(
                f"gist: {', '.join(unknown)} is not a ReLU, ReLU6, LeakyReLU or MaxPool2d of"
                f" {type(built).__name__}; its candidates are {', '.join(found)}."
            )
        wanted = set(found if modules is None else modules)
        gist_model(built, lambda name: name in wanted)
        return built

    return dataclasses.replace(workload, name=f"{workload.name}+gist", model=model)


def gist_model(model: nn.Module, only: Callable[[str], bool] = lambda _name: True) -> int:
    """Swap, in place, each ReLU, ReLU6, LeakyReLU and MaxPool2d submodule of `model`
    whose name `only` accepts for its Gist encoding; the number swapped."""
    swapped = 0
    for name, module in list(model.named_modules()):
        encoded = _encoded(module)
        if encoded is None or not only(name):
            continue
        parent_name, _, attribute = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, attribute, encoded)
        swapped += 1
    return swapped


def candidates(model: nn.Module) -> list[str]:
    """The names of `model`'s submodules that have a Gist encoding, in module order."""
    return [name for name, module in model.named_modules() if _encoded(module) is not None]


def _encoded(module: nn.Module) -> nn.Module | None:
    if type(module) is nn.ReLU:
        return GistReLU()
    if type(module) is nn.ReLU6:
        return GistReLU6()
    if type(module) is nn.LeakyReLU:
        return GistLeakyReLU(module.negative_slope)
    if type(module) is nn.MaxPool2d and _window_elements(module.kernel_size) <= _MAX_WINDOW:
        if module.return_indices:
            return None  # the caller wants the indices themselves
        return GistMaxPool2d(
            module.kernel_size, module.stride, module.padding, module.dilation, module.ceil_mode
        )
    return None


# A window's place of its largest element must fit one byte.
_MAX_WINDOW = 256


def _window_elements(kernel_size: int | tuple[int, ...]) -> int:
    sizes = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    return int(sizes[0]) * int(sizes[1])


# Bit i of a packed byte: the i-th of eight consecutive elements.
_BIT_WEIGHTS = 2 ** torch.arange(8, dtype=torch.uint8)


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """A bool tensor as uint8, eight elements a byte (the last byte padded with 0)."""
    flat = mask.reshape(-1)
    padded = F.pad(flat, (0, -flat.numel() % 8)).view(-1, 8).to(torch.uint8)
    return (padded * _BIT_WEIGHTS.to(mask.device)).sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The bool tensor of `shape` that `pack_bits` packed."""
    bits = packed.unsqueeze(1).bitwise_and(_BIT_WEIGHTS.to(packed.device)).ne(0)
    return bits.reshape(-1)[: shape.numel()].reshape(shape)


class _BitMaskActivation(torch.autograd.Function):
    """y = where(mask(x), x, slope · x) for ReLU/LeakyReLU, clamp for ReLU6; keeps only
    the packed mask for backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, kind: str, slope: float) -> torch.Tensor:
        # The masks are the conditions PyTorch's own backward tests (a NaN passes its
        # gradient through a ReLU, and not through a ReLU6, as there).
        if kind == "relu":
            y = torch.relu(x)
            mask = ~(y <= 0)
        elif kind == "relu6":
            y, mask = F.hardtanh(x, 0.0, 6.0), (x > 0) & (x < 6)
        else:
            y, mask = F.leaky_relu(x, slope), x > 0
        ctx.save_for_backward(pack_bits(mask))
        ctx.shape, ctx.kind, ctx.slope = x.shape, kind, slope
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (packed,) = ctx.saved_tensors
        mask = unpack_bits(packed, ctx.shape)
        if ctx.kind == "leaky":
            # leaky_relu_backward: grad where x > 0, else grad · slope.
            return torch.where(mask, grad, grad * ctx.slope), None, None
        # threshold_backward and hardtanh_backward: grad inside, 0 outside.
        return torch.where(mask, grad, torch.zeros((), dtype=grad.dtype)), None, None


class GistReLU(nn.ReLU):
    """`nn.ReLU` that keeps one bit an element for backward (always out of place)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BitMaskActivation.apply(x, "relu", 0.0)


class GistReLU6(nn.ReLU6):
    """`nn.ReLU6` that keeps one bit an element for backward (always out of place)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BitMaskActivation.apply(x, "relu6", 0.0)


class GistLeakyReLU(nn.LeakyReLU):
    """`nn.LeakyReLU` that keeps one bit an element for backward (always out of place)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BitMaskActivation.apply(x, "leaky", self.negative_slope)


class _WindowArgmaxPool(torch.autograd.Function):
    """2-D max-pooling that keeps, for backward, each output's place in its window (one
    byte) instead of its input and 8-byte indices."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, pool: GistMaxPool2d) -> torch.Tensor:
        kernel, stride, padding, dilation = pool.geometry()
        out, indices = F.max_pool2d(
            x, kernel, stride, padding, dilation, pool.ceil_mode, return_indices=True
        )
        width = x.shape[-1]
        rows, cols = indices // width, indices % width
        out_rows = torch.arange(out.shape[-2], device=x.device).view(-1, 1)
        out_cols = torch.arange(out.shape[-1], device=x.device).view(1, -1)
        window_row = (rows - (out_rows * stride[0] - padding[0])) // dilation[0]
        window_col = (cols - (out_cols * stride[1] - padding[1])) // dilation[1]
        ctx.save_for_backward((window_row * kernel[1] + window_col).to(torch.uint8))
        ctx.shape, ctx.pool = x.shape, pool
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (place,) = ctx.saved_tensors
        kernel, stride, padding, dilation = ctx.pool.geometry()
        window = place.long()
        out_rows = torch.arange(grad.shape[-2], device=grad.device).view(-1, 1)
        out_cols = torch.arange(grad.shape[-1], device=grad.device).view(1, -1)
        rows = out_rows * stride[0] - padding[0] + (window // kernel[1]) * dilation[0]
        cols = out_cols * stride[1] - padding[1] + (window % kernel[1]) * dilation[1]
        indices = rows * ctx.shape[-1] + cols
        # What max_pool2d_with_indices_backward does with the indices: each output's
        # gradient added at its input element, in output order.
        flat = grad.new_zeros(ctx.shape).flatten(start_dim=-2)
        flat.scatter_add_(-1, indices.flatten(start_dim=-2), grad.flatten(start_dim=-2))
        return flat.view(ctx.shape), None


class GistMaxPool2d(nn.MaxPool2d):
    """`nn.MaxPool2d` that keeps one byte an output element for backward."""

    def geometry(
        self,
    ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
        """(kernel, stride, padding, dilation), each as (rows, columns)."""

        def pair(value: Any) -> tuple[int, int]:
            return (
                (int(value), int(value))
                if isinstance(value, int)
                else (int(value[0]), int(value[1]))
            )

        stride = self.stride if self.stride else self.kernel_size
        return pair(self.kernel_size), pair(stride), pair(self.padding), pair(self.dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _WindowArgmaxPool.apply(x, self)


GIST_MODULES = (GistReLU, GistReLU6, GistLeakyReLU, GistMaxPool2d)
