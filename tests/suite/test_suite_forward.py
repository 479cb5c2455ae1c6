"""Every suite workload's inference call (`forward_of`, what `lightspeed serve-profile`
times) runs on its own batches and answers one output per sample.

Tiny workloads run on the CPU at two batch sizes. A full-size workload with a forward
of its own runs it on the meta device, shapes only, so the file stays fast on a 2-core
CPU; the others call their model as their tiny variants do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from lightspeed import suite
from lightspeed.workload.inference import forward_of

NAMES = suite.names()
TINY = [n for n in NAMES if n.endswith("-tiny")]
OWN_FORWARD_FULL_SIZE = [
    n for n in NAMES if not n.endswith("-tiny") and suite.get(n).forward is not None
]

# Where an output keeps its samples when that is not dim 0: DeepSpeech2 answers
# time-major [T, B, classes], the layout CTC loss takes.
BATCH_DIM = {"deepspeech2": 1, "deepspeech2-tiny": 1}


def _first_tensor(output: Any) -> torch.Tensor:
    """The output itself, or the first tensor of a tuple, list, dict or dataclass."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        return _first_tensor(next(iter(output.values())))
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        return _first_tensor(getattr(output, dataclasses.fields(output)[0].name))
    if isinstance(output, (tuple, list)):
        return _first_tensor(output[0])
    raise AssertionError(f"the forward answered {type(output).__name__}, not tensors")


def _to_meta(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to("meta")
    if isinstance(batch, dict):
        return {k: _to_meta(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_meta(t) for t in batch)
    return batch


@pytest.mark.parametrize("name", TINY)
def test_a_tiny_workloads_forward_answers_one_output_per_sample(name: str) -> None:
    torch.manual_seed(0)
    workload = suite.get(name)
    model = workload.model().eval()  # as serve-profile runs it: BatchNorm on running stats
    dim = BATCH_DIM.get(name, 0)
    shapes = {}
    for size in (1, 3):
        with torch.inference_mode():
            out = _first_tensor(forward_of(workload)(model, workload.batch(size)))
        assert out.shape[dim] == size, f"{name}: output {tuple(out.shape)} at batch {size}"
        assert out.is_floating_point() and torch.isfinite(out).all()
        shapes[size] = list(out.shape)
    # Only the batch dimension follows the batch size: one output of the same shape per
    # sample, so a batch of 3 is 3 requests' answers side by side.
    shapes[1][dim] = 3
    assert shapes[1] == shapes[3]


def test_models_not_served_by_a_call_on_the_inputs_give_their_own_forward() -> None:
    # These take several inputs (or, the GAN, have no forward at all): without their
    # own, serving calls the model on the batch's first element alone.
    needs_one = {"bert-base", "dcgan", "lstm-seq2seq", "ncf", "transformer-base"}
    assert needs_one <= set(OWN_FORWARD_FULL_SIZE)


@pytest.mark.parametrize("name", OWN_FORWARD_FULL_SIZE)
def test_a_full_size_workloads_own_forward_runs_on_its_batch(name: str) -> None:
    workload = suite.get(name)
    with torch.device("meta"):
        model = workload.model()
    out = _first_tensor(forward_of(workload)(model.eval(), _to_meta(workload.batch(2))))
    assert out.shape[BATCH_DIM.get(name, 0)] == 2
