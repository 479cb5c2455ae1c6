"""Workload: validation, targets from files and the suite, and errors from user code."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lightspeed import Workload
from lightspeed.dtypes import StepDtype
from lightspeed.errors import (
    ConfigError,
    OutOfMemoryError,
    TargetError,
    UnknownNameError,
    WorkloadError,
)
from lightspeed.facts.records import Phase
from lightspeed.measure.step import StepSettings, prepare, to_device
from lightspeed.workload.targets import load_target

DATA = Path(__file__).parent / "data" / "workloads.py"


def target(attr: str) -> str:
    return f"{DATA}:{attr}"


def test_loads_a_workload_attribute_and_a_factory() -> None:
    assert load_target(target("tiny")).name == "tiny"
    assert load_target(target("make_tiny")).name == "tiny"


def test_suite_name_and_unknown_name() -> None:
    assert load_target("mlp").name == "mlp"
    with pytest.raises(UnknownNameError, match="Did you mean 'mlp'"):
        load_target("mlpp")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nowhere/missing.py:tiny", "no such file"),
        (f"{DATA}:nope", "has no attribute 'nope'"),
        (f"{DATA}:not_a_workload", "is an int, not a lightspeed.Workload"),
        (str(DATA), "names a file but no attribute"),
    ],
)
def test_target_errors(spec: str, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        load_target(spec)


def test_user_code_errors_name_the_part_that_raised() -> None:
    with pytest.raises(WorkloadError, match=r"model\(\) raised ValueError: no such layer size"):
        prepare(load_target(target("broken_model")), StepSettings())
    # The first step checks the loss; it runs no forward pass before.
    with pytest.raises(WorkloadError, match=r"loss\(model, batch\) raised KeyError"):
        prepare(load_target(target("broken_loss")), StepSettings()).step()
    with pytest.raises(WorkloadError, match=r"scalar tensor, got shape \(2,\)"):
        prepare(load_target(target("vector_loss")), StepSettings()).step()


def test_out_of_memory_suggests_a_smaller_batch() -> None:
    with pytest.raises(OutOfMemoryError, match="try a smaller --batch-size"):
        prepare(load_target(target("out_of_memory")), StepSettings())


def test_batch_size_validation() -> None:
    wl = load_target(target("tiny"))
    assert wl.with_batch_size(7).batch_size == 7
    with pytest.raises(ConfigError, match="--batch-size"):
        wl.with_batch_size(0)


def test_prepared_step_trains_in_the_requested_precision() -> None:
    prepared = prepare(load_target(target("tiny")), StepSettings(dtype=StepDtype.BF16_PURE))
    assert all(p.dtype is torch.bfloat16 for p in prepared.model.parameters())
    before = [p.detach().clone() for p in prepared.model.parameters()]
    loss = prepared.step()
    assert loss.dtype is torch.bfloat16
    assert any(
        not torch.equal(a, b) for a, b in zip(before, prepared.model.parameters(), strict=True)
    )
    assert prepared.parameter_count == 8 * 2 + 2


@pytest.mark.parametrize("dtype", [StepDtype.BF16, StepDtype.FP16])
def test_a_mixed_step_keeps_fp32_parameters_and_autocasts_its_forward(dtype: StepDtype) -> None:
    from lightspeed.measure.capture import capture_step

    prepared = prepare(load_target(target("tiny")), StepSettings(dtype=dtype))
    assert prepared.workload.name == "tiny"  # not renamed by the autocast it runs under
    assert all(p.dtype is torch.float32 for p in prepared.model.parameters())
    ops = capture_step(prepared)
    (product,) = [o for o in ops if o.phase is Phase.FORWARD and o.macs]
    lower = "bfloat16" if dtype is StepDtype.BF16 else "float16"
    assert product.input_dtypes == (lower,) * 3  # addmm(b, x, Wᵀ) on autocast's copies
    # mse_loss is on autocast's fp32 list; the gradients are the fp32 parameters'.
    assert prepared.last_loss is not None and prepared.last_loss.dtype is torch.float32
    grads = [p.grad for p in prepared.model.parameters()]
    assert all(g is not None and g.dtype is torch.float32 for g in grads)


def test_to_device_casts_only_floating_tensors() -> None:
    batch = {"x": torch.ones(2, dtype=torch.float32), "ids": torch.arange(3), "meta": "keep"}
    moved = to_device(batch, torch.device("cpu"), torch.float16)
    assert moved["x"].dtype is torch.float16
    assert moved["ids"].dtype is torch.int64
    assert moved["meta"] == "keep"


def test_workload_rejects_non_callables() -> None:
    with pytest.raises(ConfigError, match="model must be callable"):
        Workload(name="x", model=None, batch=lambda n: n, loss=lambda m, b: b)  # type: ignore[arg-type]


def test_every_suite_module_is_loaded_and_registers_workloads() -> None:
    """Family modules are found on disk: a new one cannot be left out of a list."""
    import sys

    from lightspeed import suite

    names = suite.names()
    modules = sorted(
        p.stem for p in Path(suite.__file__).parent.glob("*.py") if p.stem != "__init__"
    )
    assert modules == [
        "bert",
        "detection",
        "gan",
        "gpt2",
        "inception",
        "llama",
        "mlp",
        "mobilenet",
        "pointnet",
        "recommendation",
        "resnet",
        "rl",
        "speech",
        "transformer_encoder",
        "translation",
    ]
    for module in modules:
        assert f"lightspeed.suite.{module}" in sys.modules
    assert {"mlp", "mlp-tiny", "gpt2-tiny", "resnet18-tiny"} <= set(names)


def test_counts_and_kinds_read_as_english() -> None:
    from lightspeed.units import a_kind, plural

    assert (plural(1, "sync"), plural(3, "sync"), plural(0, "sync")) == (
        "1 sync",
        "3 syncs",
        "0 syncs",
    )
    assert (a_kind(3), a_kind("x"), a_kind(None)) == ("an int", "a str", "a NoneType")


def test_a_workload_may_bring_its_own_step() -> None:
    calls: list[Phase] = []

    def own_step(model: nn.Module, batch: Any, optimizer: Any, phase: Any) -> torch.Tensor:
        with phase(Phase.FORWARD):
            loss = model(batch[0]).square().mean()
            calls.append(Phase.FORWARD)
        loss.backward()
        optimizer.step()
        return loss.detach()

    wl = dataclasses.replace(load_target(target("tiny")), step=own_step)
    seen: list[Phase] = []

    def around(phase: Phase) -> contextlib.AbstractContextManager[object]:
        seen.append(phase)
        return contextlib.nullcontext()

    loss = prepare(wl, StepSettings()).step(around)
    assert loss.shape == () and calls == seen == [Phase.FORWARD]


def test_a_step_of_its_own_must_return_a_scalar() -> None:
    wl = dataclasses.replace(
        load_target(target("tiny")), step=lambda model, batch, optimizer, phase: "done"
    )
    with pytest.raises(WorkloadError, match="its step must return a scalar tensor, got str"):
        prepare(wl, StepSettings()).step()
    with pytest.raises(ConfigError, match="step must be callable or None"):
        dataclasses.replace(wl, step=3)


def _two_part_workload() -> Workload:
    """Two linear layers, each updated by its own optimizer (SGD with momentum, Adam)."""

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 1)})

    def optimizers(m: nn.Module) -> dict[str, torch.optim.Optimizer]:
        assert isinstance(m, nn.ModuleDict)
        return {
            "a": torch.optim.SGD(m["a"].parameters(), lr=0.1, momentum=0.9),
            "b": torch.optim.Adam(m["b"].parameters(), lr=0.01),
        }

    def loss(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        assert isinstance(m, nn.ModuleDict)
        return m["b"](torch.relu(m["a"](x))).square().mean()

    def step(m: nn.Module, x: torch.Tensor, opts: Any, phase: Any) -> torch.Tensor:
        with phase(Phase.OPTIMIZER):
            for o in opts.values():
                o.zero_grad(set_to_none=True)
        with phase(Phase.FORWARD):
            value = loss(m, x)
        with phase(Phase.BACKWARD):
            value.backward()
        with phase(Phase.OPTIMIZER):
            for o in opts.values():
                o.step()
        return value.detach()

    return Workload(
        name="two-part",
        model=model,
        batch=lambda n: torch.ones(n, 4),
        loss=loss,
        batch_size=3,
        step=step,
        optimizers=optimizers,
    )


def test_a_step_of_its_own_may_update_its_parts_with_optimizers_of_their_own() -> None:
    from lightspeed.measure.memory import measure_memory

    workload = _two_part_workload()
    prepared = prepare(workload, StepSettings())
    reference = workload.model()
    opts = workload.optimizers(reference) if workload.optimizers else {}
    for _ in range(3):
        prepared.step()
        for o in opts.values():
            o.zero_grad()
        workload.loss(reference, torch.ones(3, 4)).backward()
        for o in opts.values():
            o.step()
    for (name, mine), theirs in zip(
        prepared.model.named_parameters(), reference.parameters(), strict=True
    ):
        torch.testing.assert_close(mine, theirs, msg=name)
    memory = measure_memory(prepared)
    # SGD's momentum (4·4 + 4 floats) and Adam's two moments (2·(4 + 1) floats) and its
    # step counter (one float per parameter tensor, 2): (20 + 10) · 4 B + 2 · 4 B = 128 B
    assert memory.optimizer_state_bytes == 128


def test_optimizers_of_their_own_need_a_step_of_its_own() -> None:
    with pytest.raises(ConfigError, match=r"optimizers\(model\) needs a step of its own"):
        dataclasses.replace(_two_part_workload(), step=None)
