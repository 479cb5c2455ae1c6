"""Op capture: module paths, phases, FLOPs against references, and no change to the step."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

from lightspeed import Workload
from lightspeed.errors import WorkloadError
from lightspeed.facts.records import OPTIMIZER_MODULE, Phase
from lightspeed.measure.capture import capture_step, module_path
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.suite import get, names


def _mlp_workload() -> Workload:
    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(1)
        return torch.randn(n, 5, generator=g), torch.randn(n, 6, generator=g)

    def loss(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return nn.functional.mse_loss(model(b[0]), b[1])

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Sequential(nn.Linear(6, 6)))

    return Workload(name="m", model=model, batch=batch, loss=loss, batch_size=4)


def test_module_path_from_tracker_names() -> None:
    assert module_path({"Global", "Net", "Net.layers", "Net.layers.0"}, "Net") == "layers.0"
    assert module_path({"Global", "Net"}, "Net") == ""
    assert module_path({"Global"}, "Net") == ""
    assert module_path({"Global", "MSELoss"}, "Net") == "MSELoss"


def test_of_active_siblings_the_last_entered_is_the_innermost() -> None:
    # In the backward, modules left long ago stay active beside the one running; and a
    # module and its only child (one output tensor) are entered child first.
    parents = {"Global", "Net", "Net.a", "Net.b"}
    assert module_path(parents, "Net", {"Net": 0, "Net.a": 1, "Net.b": 2}) == "b"
    assert module_path(parents, "Net", {"Net": 0, "Net.a": 2, "Net.b": 1}) == "a"
    child_first = {"Net.s.0": 5, "Net.s": 6, "Net": 7}
    assert module_path({"Global", "Net", "Net.s", "Net.s.0"}, "Net", child_first) == "s.0"


def test_two_like_layers_backward_their_own_products() -> None:
    # The encoder's layers are alike: each one's backward runs the same products.
    ops = capture_step(prepare(get("transformer-encoder-tiny"), StepSettings()))
    products = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")

    def backward_flops(layer: str) -> int:
        return sum(
            o.flops
            for o in ops
            if o.phase is Phase.BACKWARD
            and o.name in products
            and o.module.startswith(f"encoder.layers.{layer}")
        )

    assert backward_flops("0") == backward_flops("1") > 0


def test_capture_records_modules_phases_and_exact_linear_flops() -> None:
    prepared = prepare(_mlp_workload(), StepSettings())
    prepared.step()  # warm: optimizer state exists
    ops = capture_step(prepared)
    forward_mm = [o for o in ops if o.phase is Phase.FORWARD and o.name == "aten::addmm"]
    assert [o.module for o in forward_mm] == ["0", "2.0"]
    # Linear(5→6) on batch 4: 2·4·5·6 = 240 FLOPs, 120 MACs
    assert (forward_mm[0].flops, forward_mm[0].macs) == (240, 120)
    backward_mm = [o for o in ops if o.phase is Phase.BACKWARD and o.name == "aten::mm"]
    assert backward_mm and all(o.module in ("0", "2.0") for o in backward_mm)
    assert {o.module for o in ops if o.phase is Phase.OPTIMIZER} == {OPTIMIZER_MODULE}
    assert [o.index for o in ops] == list(range(len(ops)))
    assert all(o.flops_known for o in ops)
    assert not any(o.name.startswith("profiler::") for o in ops)


def test_capture_does_not_change_the_step() -> None:
    plain = prepare(_mlp_workload(), StepSettings())
    observed = prepare(_mlp_workload(), StepSettings())
    for _ in range(2):
        plain.step()
    observed.step()
    capture_step(observed)
    for a, b in zip(plain.model.parameters(), observed.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_capture_restores_state_when_the_step_raises() -> None:
    def bad_loss(model: nn.Module, batch: object) -> torch.Tensor:
        raise ValueError("boom")

    prepared = prepare(_mlp_workload(), StepSettings())
    prepared.workload = Workload(  # same model, a loss that now fails
        name="m", model=prepared.workload.model, batch=prepared.workload.batch, loss=bad_loss
    )
    with pytest.raises(WorkloadError, match="boom"):
        capture_step(prepared)
    assert _get_current_dispatch_mode() is None


def test_gpt2_tiny_attention_is_counted_on_the_cpu() -> None:
    prepared = prepare(get("gpt2-tiny"), StepSettings())
    prepared.step()
    ops = capture_step(prepared)
    attention = [o for o in ops if "scaled_dot_product" in o.name and o.phase is Phase.FORWARD]
    assert len(attention) == 2  # one per layer
    # B=4, H=2, T=128, D=64: QKᵀ and AV in full = 4·B·H·T·T·D = 4·4·2·128·128·64 = 33,554,432
    assert all(o.flops == 33_554_432 for o in attention)
    assert all(o.causal for o in attention)
    assert sorted(o.module for o in attention) == ["blocks.0.attn", "blocks.1.attn"]


def _recurrent_workload(kind: type[nn.RNNBase], packed: bool = False, **options: Any) -> Workload:
    """Two recurrent layers over 8 steps of 5 features; `packed` runs a PackedSequence of
    sequences 8, 6, 4 and 2 steps long (sorted: unsorted lengths add a `sort`)."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return kind(5, 6, num_layers=2, **options)

    def batch(n: int) -> torch.Tensor:
        return torch.randn(8, n, 5, generator=torch.Generator().manual_seed(1))

    def loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if packed:
            lengths = [8 - 2 * (i % 4) for i in range(x.shape[1])]
            y = model(nn.utils.rnn.pack_padded_sequence(x, lengths))[0]
            return y.data.square().mean()
        return model(x)[0].square().mean()

    return Workload(name="rnn", model=model, batch=batch, loss=loss, batch_size=4)


# Every workload the capture tests run, the tiny suite and recurrent layers of each kind.
STEP_WORKLOADS: dict[str, Callable[[], Workload]] = {
    **{name: functools.partial(get, name) for name in names() if name.endswith("-tiny")},
    "mlp-test": _mlp_workload,
    "lstm": functools.partial(_recurrent_workload, nn.LSTM),
    "lstm-bidirectional-batch-first-no-bias": functools.partial(
        _recurrent_workload, nn.LSTM, bidirectional=True, batch_first=True, bias=False
    ),
    "lstm-proj": functools.partial(_recurrent_workload, nn.LSTM, proj_size=3),
    "lstm-packed": functools.partial(_recurrent_workload, nn.LSTM, packed=True),
    "gru-bidirectional": functools.partial(_recurrent_workload, nn.GRU, bidirectional=True),
    "gru-packed": functools.partial(_recurrent_workload, nn.GRU, packed=True),
    "rnn-tanh": functools.partial(_recurrent_workload, nn.RNN),
    "rnn-relu": functools.partial(_recurrent_workload, nn.RNN, nonlinearity="relu"),
}


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")
@pytest.mark.parametrize("name", STEP_WORKLOADS)
def test_every_op_of_a_step_has_a_flop_formula(name: str) -> None:
    """Ops with no formula count 0 FLOPs (`flops_known=False`); none of these steps'
    may: views, copies and fills are declared zero-FLOP, everything else counted."""
    ops = capture_step(prepare(STEP_WORKLOADS[name](), StepSettings()))
    unknown = sorted({op.name for op in ops if not op.flops_known})
    assert unknown == []


def test_submodules_a_step_calls_directly_keep_their_paths() -> None:
    """A GAN's step calls its two networks, both `Sequential`s, without the parent's
    forward: each op still belongs to its own network, by full path."""
    prepared = prepare(get("dcgan-tiny"), StepSettings())
    prepared.step()
    ops = capture_step(prepared)
    forward = {o.module.split(".")[0] for o in ops if o.phase is Phase.FORWARD and o.module}
    assert forward == {"generator", "discriminator"}
    transposed = {
        o.module for o in ops if o.name == "aten::convolution" and "generator" in o.module
    }
    assert transposed == {"generator.0", "generator.3", "generator.6", "generator.9"}


def test_whether_a_profiler_records_is_read_from_the_pinned_torch() -> None:
    from lightspeed.workload.torch_internals import profiler_running

    assert not profiler_running()
    with torch.profiler.profile():
        assert profiler_running()
    assert not profiler_running()
