"""Finding the tensors inside op arguments, batches and optimizer state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in `value`, in order, walking lists, tuples and dict values."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
