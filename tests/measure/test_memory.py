"""Memory of one training step by category, on tiny real workloads, with exact byte counts.

Every expected number carries its arithmetic. The saved-for-backward and peak numbers
are what torch 2.13's CPU kernels do; a torch upgrade that changes what an op saves or
allocates changes them, and the comments say which op to look at.
"""

from __future__ import annotations

import gc
import itertools
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

from factories import examples
from lightspeed.dtypes import StepDtype
from lightspeed.errors import WorkloadError
from lightspeed.facts.device import Device
from lightspeed.measure.memory import CATEGORIES, fit_to_peak, measure_memory, sample_extremes
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.workload import Workload, default_optimizer

FP32 = 4  # bytes per float32 element
BF16 = 2  # bytes per bfloat16 element


def tiny_net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def xy_batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 8), torch.randn(n, 4)


def mse(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return F.mse_loss(model(x), y)


def warmed(
    model: Callable[[], nn.Module] = tiny_net,
    *,
    batch: Callable[[int], Any] = xy_batch,
    loss: Callable[[nn.Module, Any], torch.Tensor] = mse,
    optimizer: Callable[[Any], torch.optim.Optimizer] = default_optimizer,
    batch_size: int = 5,
    settings: StepSettings | None = None,
    seed: int = 0,
) -> PreparedStep:
    """The workload prepared on the CPU and stepped once, so its optimizer state exists."""
    torch.manual_seed(seed)
    workload = Workload(
        name="memory-test",
        model=model,
        batch=batch,
        loss=loss,
        optimizer=optimizer,
        batch_size=batch_size,
    )
    prepared = prepare(workload, settings or StepSettings())
    prepared.step()
    return prepared


def step_counter_bytes(prepared: PreparedStep) -> int:
    """Bytes of AdamW's `step` counter, read from the real state (one per parameter tensor).

    torch 2.13's AdamW keeps it as a 0-dim float32 tensor on the CPU unless capturable or
    fused: 4 bytes.
    """
    (nbytes,) = {
        state["step"].untyped_storage().nbytes() for state in prepared.optimizer.state.values()
    }
    return nbytes


def test_fp32_adamw_parameters_gradients_and_optimizer_state_are_exact() -> None:
    prepared = warmed()
    memory = measure_memory(prepared)
    # P = 8·16 + 16 + 16·4 + 4 = 212 elements in 4 parameter tensors.
    assert prepared.parameter_count == 212
    assert step_counter_bytes(prepared) == 4
    assert memory.parameters_bytes == 848  # 4 · 212
    assert memory.gradients_bytes == 848  # 4 · 212
    assert memory.optimizer_state_bytes == 1712  # exp_avg + exp_avg_sq: 8 · 212, + 4 steps · 4
    assert memory.inputs_bytes == 240  # x: 5·8·4 = 160, y: 5·4·4 = 80
    assert memory.method == "tracked-storages"


def test_fp32_adamw_peak_is_in_the_update_of_the_first_weight() -> None:
    memory = measure_memory(warmed())
    # AdamW's single-tensor update of the 16×8 weight holds exp_avg_sq.sqrt() and its
    # division by the bias correction at once: 2 · 16·8·4 = 1024 bytes of temporaries,
    # beside the loss, a 0-dim view into mse_loss's 5·4·4 = 80-byte buffer.
    assert memory.at_peak_bytes == {
        "parameters": 848,
        "gradients": 848,
        "optimizer_state": 1712,
        "activations": 0,  # backward has freed them all
        "temporaries": 1104,  # 1024 + 80
        "inputs": 240,
    }
    assert memory.temporaries_bytes == 1104
    assert memory.peak_bytes == 4752  # 848 + 848 + 1712 + 1104 + 240


def test_sgd_peak_is_in_the_relu_backward() -> None:
    memory = measure_memory(warmed(optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1)))
    # Plain SGD updates in place, so the peak is in backward, at ReLU's backward:
    # gradients of the second Linear exist (16·4·4 + 4·4 = 272 bytes); the ReLU output is
    # still saved (5·16·4 = 320); temporaries are the loss's 80-byte buffer, the 4-byte
    # seed gradient, the gradient flowing into ReLU (5·16·4 = 320) and the one it
    # returns (320): 80 + 4 + 320 + 320 = 724.
    assert memory.at_peak_bytes == {
        "parameters": 848,
        "gradients": 272,
        "optimizer_state": 0,
        "activations": 320,
        "temporaries": 724,
        "inputs": 240,
    }
    assert memory.peak_bytes == 2404  # 848 + 272 + 320 + 724 + 240


def test_activations_of_a_tiny_net_are_what_autograd_saves() -> None:
    memory = measure_memory(warmed())
    # Linear 1 (addmm) saves x (an input) and, as x needs no grad, nothing else; ReLU saves
    # its output, 5·16·4 = 320 bytes; Linear 2 saves that same output and W2.t() (a view
    # of a parameter); mse_loss saves its input, 5·4·4 = 80 bytes, and y (an input).
    assert memory.activations_bytes == 400  # 320 + 80


def test_bf16_halves_parameters_gradients_and_inputs() -> None:
    prepared = warmed(settings=StepSettings(dtype=StepDtype.BF16_PURE))
    memory = measure_memory(prepared)
    assert memory.parameters_bytes == 424  # 2 · 212
    assert memory.gradients_bytes == 424  # 2 · 212
    assert memory.inputs_bytes == 120  # (5·8 + 5·4) · 2
    assert memory.activations_bytes == 200  # ReLU output 5·16·2 + mse_loss input 5·4·2


class TiedPair(nn.Module):
    """Two bias-free 8×8 Linears sharing one weight."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 8, bias=False)
        self.second = nn.Linear(8, 8, bias=False)
        self.second.weight = self.first.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def test_tied_weights_count_once() -> None:
    prepared = warmed(TiedPair, batch=lambda n: (torch.randn(n, 8), torch.randn(n, 8)))
    memory = measure_memory(prepared)
    assert memory.parameters_bytes == 256  # one 8·8 weight · 4
    assert memory.gradients_bytes == 256  # one grad for it
    assert memory.optimizer_state_bytes == 516  # 8 · 64 + one 4-byte step counter


def test_inputs_walk_dicts_and_keep_integer_dtypes() -> None:
    def batch(n: int) -> dict[str, torch.Tensor]:
        return {"x": torch.randn(n, 8), "label": torch.randint(0, 4, (n,))}

    def loss(model: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(model(b["x"]), b["label"])

    memory = measure_memory(warmed(batch=batch, loss=loss))
    assert memory.inputs_bytes == 200  # x: 5·8·4 = 160, labels: 5 int64 · 8 = 40


def test_a_measured_step_gives_the_same_result_as_a_plain_step() -> None:
    measured, plain = warmed(seed=3), warmed(seed=3)
    measure_memory(measured)
    plain.step()
    assert measured.last_loss is not None and plain.last_loss is not None
    assert torch.equal(measured.last_loss, plain.last_loss)
    for p, q in zip(measured.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.equal(p, q)
        assert p.grad is not None and q.grad is not None
        assert torch.equal(p.grad, q.grad)


def _interception_is_off() -> None:
    assert _get_current_dispatch_mode() is None
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None


def test_state_is_restored_when_the_forward_raises() -> None:
    freed: list[bool] = []

    def failing_loss(model: nn.Module, batch: Any) -> torch.Tensor:
        if _get_current_dispatch_mode() is None:  # prepare() and the warm-up step
            return mse(model, batch)
        hidden = torch.relu(model[0](batch[0]))  # saved for backward: a grad_fn cycle
        weakref.finalize(hidden.untyped_storage(), freed.append, True)
        raise ValueError("boom in the forward")

    prepared = warmed(loss=failing_loss)
    finalizers = len(weakref.finalize._registry)  # type: ignore[attr-defined]
    with pytest.raises(WorkloadError, match="boom in the forward") as info:
        measure_memory(prepared)
    del info  # its traceback holds the loss's frame, and so `hidden`
    gc.collect()
    _interception_is_off()
    assert len(weakref.finalize._registry) == finalizers  # type: ignore[attr-defined]
    # Released although backward never ran through the graph that saved it.
    assert freed == [True]


def test_state_is_restored_when_the_backward_raises() -> None:
    def failing_loss(model: nn.Module, batch: Any) -> torch.Tensor:
        out = model(batch[0])
        if _get_current_dispatch_mode() is not None:
            out.register_hook(_raise)
        return F.mse_loss(out, batch[1])

    prepared = warmed(loss=failing_loss)
    with pytest.raises(WorkloadError, match="boom in the backward"):
        measure_memory(prepared)
    _interception_is_off()


def test_saved_tensors_of_a_branch_backward_never_reaches_are_freed() -> None:
    freed: list[bool] = []

    def loss_with_a_dropped_branch(model: nn.Module, batch: Any) -> torch.Tensor:
        if _get_current_dispatch_mode() is not None:
            # Computed with grad and dropped: ReLU's saved output is held by a
            # tensor -> grad_fn -> saved tensor cycle that no backward breaks.
            dropped = torch.relu(model[0](batch[0]))
            weakref.finalize(dropped.untyped_storage(), freed.append, True)
        return mse(model, batch)

    measure_memory(warmed(loss=loss_with_a_dropped_branch))
    gc.collect()
    assert freed == [True]


def _raise(grad: torch.Tensor) -> torch.Tensor:
    raise ValueError("boom in the backward")


@settings(max_examples=examples(20), deadline=None)
@given(
    widths=st.lists(st.integers(1, 24), min_size=2, max_size=4),
    batch_size=st.integers(1, 12),
)
def test_categories_at_the_peak_sum_to_the_peak(widths: list[int], batch_size: int) -> None:
    def model() -> nn.Module:
        layers: list[nn.Module] = []
        for fan_in, fan_out in itertools.pairwise(widths):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
        return nn.Sequential(*layers[:-1])

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, widths[0]), torch.randn(n, widths[-1])

    memory = measure_memory(warmed(model, batch=batch, batch_size=batch_size))
    assert set(memory.at_peak_bytes) == set(CATEGORIES)
    assert sum(memory.at_peak_bytes.values()) == memory.peak_bytes
    assert min(memory.categories().values()) >= 0
    assert min(memory.at_peak_bytes.values()) >= 0
    # Alive from the start of the step to its end, so at its peak too.
    always_live = memory.parameters_bytes + memory.optimizer_state_bytes + memory.inputs_bytes
    assert memory.peak_bytes >= always_live
    assert memory.at_peak_bytes["parameters"] == memory.parameters_bytes
    assert memory.at_peak_bytes["optimizer_state"] == memory.optimizer_state_bytes


def test_fit_to_peak_counts_untracked_bytes_as_temporaries() -> None:
    tracked = {"parameters": 100, "activations": 40, "temporaries": 10}
    assert fit_to_peak(tracked, 512) == {"parameters": 100, "activations": 40, "temporaries": 372}


def test_fit_to_peak_shrinks_temporaries_first_then_scales() -> None:
    tracked = {"parameters": 100, "activations": 40, "temporaries": 10}
    assert fit_to_peak(tracked, 145) == {"parameters": 100, "activations": 40, "temporaries": 5}
    # 140 tracked bytes into 70: every category halves.
    assert fit_to_peak(tracked, 70) == {"parameters": 50, "activations": 20, "temporaries": 0}
    # 140 into 71: 50.71 and 20.29 round down to 70, the larger remainder takes the last byte.
    assert fit_to_peak(tracked, 71) == {"parameters": 51, "activations": 20, "temporaries": 0}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_peak_comes_from_the_allocator() -> None:
    prepared = warmed(settings=StepSettings(device=Device.CUDA))
    memory = measure_memory(prepared)
    assert memory.method == "cuda-allocator"
    assert sum(memory.at_peak_bytes.values()) == memory.peak_bytes
    assert memory.parameters_bytes == 848  # 4 · 212
    # exp_avg + exp_avg_sq on the GPU, step counters (on the CPU) read from the state.
    assert memory.optimizer_state_bytes == 8 * 212 + 4 * step_counter_bytes(prepared)
    # Parameters, moments and the batch live on the GPU the whole step.
    assert memory.peak_bytes >= 848 + 8 * 212 + 240


def test_the_memory_over_the_step_reaches_the_peak_and_follows_the_phases() -> None:
    memory = measure_memory(warmed())
    over = memory.over_step
    assert over is not None
    assert set(over.bytes) == set(CATEGORIES)
    assert max(over.totals()) == memory.peak_bytes
    # Parameters and optimizer state live through the whole step.
    assert set(over.bytes["parameters"]) == {memory.parameters_bytes}
    assert set(over.bytes["optimizer_state"]) == {memory.optimizer_state_bytes}
    assert list(over.op_index) == sorted(over.op_index)
    # zero_grad, the loss, backward, the update (a span that ran no op is left out).
    spans = [phase for phase, _, _ in over.phases]
    assert spans[-3:] == ["forward", "backward", "optimizer"]
    assert spans[:-3] in ([], ["optimizer"])
    for (_, _, end), (_, first, _) in itertools.pairwise(over.phases):
        assert end == first


@settings(max_examples=examples(50), deadline=None)
@given(
    totals=st.lists(st.integers(0, 10**6), min_size=1, max_size=300),
    most=st.integers(3, 40),
)
def test_a_long_step_keeps_few_points_and_always_its_peak(totals: list[int], most: int) -> None:
    points = [(i, (t, 0)) for i, t in enumerate(totals)]
    kept = sample_extremes(points, most)
    if len(points) <= most:
        assert kept == points
    assert (len(kept) <= max(most, len(points)) and len(kept) <= max(most, 0)) or kept == points
    assert max(sum(sizes) for _, sizes in kept) == max(totals)
    assert min(sum(sizes) for _, sizes in kept) == min(totals)
    assert kept == sorted(kept)  # in the order they happened
    assert kept[-1] == points[-1]  # where the step ends
    assert set(kept) <= set(points)
