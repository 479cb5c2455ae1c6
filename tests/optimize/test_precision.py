"""autocast: the forward's matmuls in bf16 or fp16, the parameters and gradients in fp32.

The reference is the same workload in fp32. bf16 keeps 8 significant bits, a unit
roundoff of u = 2^-8; the loss (a mean of log-softmax, computed in fp32 under autocast)
lands within 2u of the fp32 loss, and each gradient, after a few roundings of its
inputs compound, within 4u in relative norm.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightspeed import suite
from lightspeed.errors import ConfigError
from lightspeed.facts.records import Phase
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.optimize.precision import LossScaling, autocast, loss_scaler
from lightspeed.workload import PhaseHook, Workload

BF16_ROUNDOFF = 2.0**-8


def stepped(workload: Workload, watch: dict[str, torch.dtype] | None = None) -> PreparedStep:
    """`workload` built from seed 0 after one step from seed 1; `watch` gets the output
    dtype of each Linear and convolution in the step's forward, by module name."""
    torch.manual_seed(0)
    prepared = prepare(workload, StepSettings())
    if watch is not None:

        def record(name: str) -> Any:
            def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
                watch.setdefault(name, output.dtype)

            return hook

        for name, module in prepared.model.named_modules():
            if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
                module.register_forward_hook(record(name))
    torch.manual_seed(1)
    prepared.step()
    return prepared


def test_gpt2_forward_runs_in_bf16_and_the_weights_stay_fp32() -> None:
    outputs: dict[str, torch.dtype] = {}
    plain = stepped(suite.get("gpt2-tiny"))
    mixed = stepped(autocast(suite.get("gpt2-tiny")), outputs)
    assert mixed.workload.name == "gpt2-tiny+amp-bf16"
    assert outputs["blocks.0.attn.qkv"] == torch.bfloat16
    assert outputs["lm_head"] == torch.bfloat16
    assert plain.last_loss is not None and mixed.last_loss is not None
    assert mixed.last_loss.dtype == torch.float32
    assert torch.isclose(mixed.last_loss, plain.last_loss, rtol=2 * BF16_ROUNDOFF, atol=0)
    reference = dict(plain.model.named_parameters())
    for name, param in mixed.model.named_parameters():
        assert param.dtype == torch.float32, name
        assert param.grad is not None and param.grad.dtype == torch.float32, name
        expected = reference[name].grad
        assert expected is not None
        error = (param.grad - expected).norm() / expected.norm()
        assert error < 4 * BF16_ROUNDOFF, name


def test_fp16_names_itself_and_casts_matmuls_to_fp16() -> None:
    outputs: dict[str, torch.dtype] = {}
    mixed = stepped(autocast(suite.get("transformer-encoder-tiny"), "fp16"), outputs)
    assert mixed.workload.name == "transformer-encoder-tiny+amp-fp16"
    assert outputs["head"] == torch.float16


def test_the_step_leaves_autocast_off() -> None:
    stepped(autocast(suite.get("gpt2-tiny")))
    assert not torch.is_autocast_enabled("cpu")


def own_step_workload(seen: list[tuple[Phase, bool]]) -> Workload:
    """A workload that writes its step and records whether autocast is on in each phase;
    its backward is nested inside its forward phase, as a careless step might."""

    def step(model: nn.Module, batch: Any, optimizer: Any, phase: PhaseHook) -> torch.Tensor:
        x, y = batch
        optimizer.zero_grad()
        with phase(Phase.FORWARD):
            seen.append((Phase.FORWARD, torch.is_autocast_enabled("cpu")))
            loss = F.mse_loss(model(x).float(), y)
            with phase(Phase.BACKWARD):
                seen.append((Phase.BACKWARD, torch.is_autocast_enabled("cpu")))
                loss.backward()
        with phase(Phase.OPTIMIZER):
            seen.append((Phase.OPTIMIZER, torch.is_autocast_enabled("cpu")))
            optimizer.step()
        return loss

    return Workload(
        name="own-step",
        model=lambda: nn.Linear(4, 2),
        batch=lambda n: (torch.randn(n, 4), torch.randn(n, 2)),
        loss=lambda model, batch: F.mse_loss(model(batch[0]), batch[1]),
        step=step,
    )


def test_a_workloads_own_step_gets_autocast_in_its_forward_phase_only() -> None:
    seen: list[tuple[Phase, bool]] = []
    phases: list[Phase] = []

    @contextlib.contextmanager
    def observer(phase: Phase) -> Iterator[None]:
        phases.append(phase)
        yield

    torch.manual_seed(0)
    prepared = prepare(autocast(own_step_workload(seen)), StepSettings())
    prepared.step(observer)
    assert seen == [(Phase.FORWARD, True), (Phase.BACKWARD, False), (Phase.OPTIMIZER, False)]
    assert phases == [
        Phase.FORWARD,
        Phase.BACKWARD,
        Phase.OPTIMIZER,
    ]  # the observer still sees them
    assert all(p.dtype == torch.float32 for p in prepared.model.parameters())


def test_a_gan_step_runs_its_convolutions_in_bf16() -> None:
    outputs: dict[str, torch.dtype] = {}
    mixed = stepped(autocast(suite.get("dcgan-tiny")), outputs)
    assert set(outputs.values()) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in mixed.model.parameters())


@pytest.mark.parametrize(
    ("dtype", "message"), [("fp32", "not a lower precision"), ("fp4", "not a precision")]
)
def test_a_dtype_autocast_cannot_use_is_refused(dtype: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        autocast(suite.get("gpt2-tiny"), dtype)


def linear_workload() -> Workload:
    return Workload(
        name="linear",
        model=lambda: nn.Linear(4, 2),
        batch=lambda n: torch.ones(n, 4),
        loss=lambda m, b: m(b).float().square().mean(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=3,
    )


def test_the_fp16_loss_scaler_grows_backs_off_and_skips_step_by_step() -> None:
    scaling = LossScaling(init_scale=8.0, growth_interval=2)
    prepared = prepare(autocast(linear_workload(), "fp16", loss_scaling=scaling), StepSettings())
    assert isinstance(prepared.optimizer, torch.optim.Optimizer)
    finite, infinite = prepared.batch, torch.full((3, 4), float("inf"))
    # (batch, the scale after the step, whether the parameters moved)
    script = [
        (finite, 8.0, True),  # one finite step: not yet the interval
        (finite, 16.0, True),  # two in a row: × growth 2
        (infinite, 8.0, False),  # an inf gradient: skipped, × back-off 0.5
        (finite, 8.0, True),  # the count starts again
        (finite, 16.0, True),
    ]
    for batch, scale, moves in script:
        before = [p.detach().clone() for p in prepared.model.parameters()]
        prepared.batch = batch
        prepared.step()
        scaler = loss_scaler(prepared.optimizer)
        assert scaler is not None and scaler.get_scale() == scale
        after = list(prepared.model.parameters())
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True)) is not moves


def test_the_scaled_update_equals_the_unscaled_one() -> None:
    # Scaling by a power of two and unscaling is exact: the fp16 step's update is the
    # one an fp16 step without a scaler makes, where its gradients do not underflow.
    def one_step(scaling: LossScaling | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        workload = autocast(linear_workload(), "fp16", loss_scaling=scaling)
        if scaling is None:
            workload = dataclasses.replace(workload, step=None)
        prepared = prepare(workload, StepSettings())
        prepared.step()
        return [p.detach() for p in prepared.model.parameters()]

    scaled, plain = one_step(LossScaling(init_scale=2.0**10)), one_step(None)
    assert all(torch.equal(a, b) for a, b in zip(scaled, plain, strict=True))


def test_bf16_has_no_loss_scaler() -> None:
    prepared = prepare(autocast(linear_workload(), "bf16"), StepSettings())
    prepared.step()
    assert isinstance(prepared.optimizer, torch.optim.Optimizer)
    assert loss_scaler(prepared.optimizer) is None
