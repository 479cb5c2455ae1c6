"""A workload's model ready to serve: requests' samples in, each sample's output out.

A request carries only the model's inputs. Which tensors of the workload's batch those
are: for a model called on its inputs, `inputs_of` says (a tuple's first element, a
dict's non-label keys). A workload with its own `forward` may read any of its batch's
tensors, so each is tried once at start: a tensor whose change changes the output is an
input; one that does not (a label the forward never reads) is taken from the workload's
own `batch(n)`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from lightspeed.dtypes import StepDtype
from lightspeed.errors import WorkloadError
from lightspeed.facts.device import Device
from lightspeed.measure.device import require, torch_dtype
from lightspeed.measure.step import guard, to_device
from lightspeed.serving.codec import Leaf, Sample, Schema, rows
from lightspeed.workload.inference import LABEL_KEYS, forward_of, inputs_of
from lightspeed.workload.workload import Workload

Key = int | str | None


class Engine:
    """`workload`'s model on `device` in `dtype`, evaluated in inference mode; `run` is
    called from one thread at a time."""

    def __init__(
        self, workload: Workload, device: Device = Device.CPU, dtype: StepDtype = StepDtype.FP32
    ) -> None:
        self.workload = workload
        self.device = require(device)
        self.dtype = dtype
        self._stored = torch_dtype(dtype.stored)
        with guard(workload, "building the model"):
            self.model = workload.model().to(device=self.device, dtype=self._stored).eval()
        self._forward = forward_of(workload)
        self.threads = torch.get_num_threads()
        self._templates: dict[int, Any] = {}
        self.schema = Schema(tuple(self._input_leaves()))

    @property
    def name(self) -> str:
        """The workload's name."""
        return self.workload.name

    @property
    def target(self) -> str | None:
        """The target the workload was loaded from."""
        return self.workload.target

    def thread_setup(self) -> None:
        """Run `run` on as many threads as torch had when the engine was built: a new
        thread's OpenMP team starts at every core, whatever `torch.set_num_threads` told
        the thread that made the engine."""
        torch.set_num_threads(self.threads)

    def template(self, n: int) -> Any:
        """The workload's own batch of `n` on the device (kept: labels come from it)."""
        if n not in self._templates:
            with guard(self.workload.with_batch_size(n), "making the batch"):
                self._templates[n] = to_device(self.workload.batch(n), self.device, self._stored)
        return self._templates[n]

    def sample(self, index: int = 0) -> Sample:
        """Sample `index` of the workload's batch, as a request carries it: a valid
        input to send."""
        batch = self.template(index + 1)
        sample = {}
        for leaf in self.schema.leaves:
            row = _leaf(batch, leaf.key)[index].cpu()
            sample[leaf.name] = (row.float() if row.is_floating_point() else row).numpy()
        return sample

    def run(self, samples: Sequence[Sample]) -> list[Any]:
        """The model on `samples` as one batch: each sample's output, NumPy arrays in the
        lists and mappings the model returns them in."""
        n = len(samples)
        batch = self.template(n)
        for leaf in self.schema.leaves:
            stacked = torch.from_numpy(np.stack([s[leaf.name] for s in samples]))
            batch = _replace(batch, leaf.key, to_device(stacked, self.device, self._stored))
        return rows(_to_numpy(self._call(batch)), n)

    def _call(self, batch: Any) -> Any:
        with guard(self.workload, "the forward"), torch.inference_mode(), self._autocast():
            return self._forward(self.model, batch)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self.dtype.mixed:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch_dtype(self.dtype.precision))

    def _input_leaves(self) -> Iterator[Leaf]:
        batch = self.template(1)
        if self.workload.forward is None:
            args, kwargs = inputs_of(batch)
            if isinstance(batch, torch.Tensor):
                keys: list[Key] = [None]
            elif isinstance(batch, dict):
                keys = [k for k in kwargs if isinstance(batch[k], torch.Tensor)]
            else:
                keys = [0] if isinstance(args[0], torch.Tensor) else []
        else:
            keys = [k for k in _tensor_keys(batch) if self._reads(batch, k)]
        if not keys:
            raise WorkloadError(
                f"workload {self.workload.name!r}: its inference reads no tensor of its"
                " batch, so a request has nothing to carry."
            )
        for key in keys:
            tensor = _leaf(batch, key)
            dtype = np.dtype("float32") if tensor.is_floating_point() else _numpy_dtype(tensor)
            yield Leaf(key=key, shape=tuple(tensor.shape[1:]), dtype=dtype)

    def _reads(self, batch: Any, key: Key) -> bool:
        if isinstance(key, str) and key in LABEL_KEYS:
            return False
        tensor = _leaf(batch, key)
        if tensor.is_floating_point():
            changed = tensor + 1.0
        else:  # other valid ids: one less, or one more where 0
            changed = torch.where(tensor > 0, tensor - 1, tensor + 1)
        return not _same(self._call(batch), self._call(_replace(batch, key, changed)))


def _tensor_keys(batch: Any) -> list[Key]:
    if isinstance(batch, torch.Tensor):
        return [None]
    if isinstance(batch, dict):
        return [k for k, v in batch.items() if isinstance(v, torch.Tensor)]
    if isinstance(batch, (tuple, list)):
        return [i for i, v in enumerate(batch) if isinstance(v, torch.Tensor)]
    return []


def _leaf(batch: Any, key: Key) -> torch.Tensor:
    value = batch if key is None else batch[key]
    assert isinstance(value, torch.Tensor)
    return value


def _replace(batch: Any, key: Key, tensor: torch.Tensor) -> Any:
    if key is None:
        return tensor
    if isinstance(batch, dict):
        return {**batch, key: tensor}
    assert isinstance(key, int)
    items = list(batch)
    items[key] = tensor
    return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _numpy_dtype(tensor: torch.Tensor) -> np.dtype[Any]:
    return torch.empty(0, dtype=tensor.dtype).numpy().dtype


def _to_numpy(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        if output.is_floating_point() and output.dtype not in (torch.float32, torch.float64):
            output = output.float()  # JSON has no bf16/fp16
        return output.detach().cpu().contiguous().numpy()
    if isinstance(output, Mapping):
        return {str(k): _to_numpy(v) for k, v in output.items()}
    if isinstance(output, (tuple, list)):
        return [_to_numpy(v) for v in output]
    return output
