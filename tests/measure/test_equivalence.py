"""Equivalence checks: a transform that keeps the computation passes, one that changes it
fails, with the difference and where it is."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lightspeed.errors import ConfigError
from lightspeed.measure.equivalence import gradients_match, loss_curves_match
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.optimize.precision import autocast
from lightspeed.suite import get


def scaled_loss(name: str, factor: float) -> object:
    workload = get(name)
    inner = workload.loss
    return dataclasses.replace(
        workload, name=f"{name}*{factor}", loss=lambda m, b: inner(m, b) * factor
    )


def test_checkpointing_passes_bit_for_bit() -> None:
    found = gradients_match(get("gpt2-tiny"), checkpoint(get("gpt2-tiny"), "auto"))
    assert found.passed and found.error == 0.0 and found.check.endswith("bit for bit")


def test_a_changed_loss_fails_with_its_relative_difference() -> None:
    found = gradients_match(get("mlp-tiny"), scaled_loss("mlp-tiny", 1.01))  # type: ignore[arg-type]
    assert not found.passed
    assert found.error == pytest.approx(0.01, rel=1e-3)
    assert found.worst  # a parameter's name
    loose = gradients_match(get("mlp-tiny"), scaled_loss("mlp-tiny", 1.01), tolerance=0.02)  # type: ignore[arg-type]
    assert loose.passed


def test_bf16_autocast_trains_within_the_seed_to_seed_spread() -> None:
    found = loss_curves_match(get("mlp-tiny"), autocast(get("mlp-tiny"), "bf16"), steps=10)
    assert found.passed and 0 < found.error <= found.tolerance
    assert found.check == "loss over 10 steps, within the spread over 3 seeds"


def test_a_ten_times_larger_learning_rate_is_not_within_it() -> None:
    workload = get("mlp-tiny")
    faster = dataclasses.replace(
        workload, optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2)
    )
    found = loss_curves_match(workload, faster, steps=10)
    assert not found.passed and found.error > found.tolerance


def test_different_parameters_are_refused() -> None:
    inner = get("mlp-tiny").model
    wrapped = dataclasses.replace(get("mlp-tiny"), model=lambda: torch.nn.Sequential(inner()))
    with pytest.raises(ConfigError, match="different parameters"):
        gradients_match(get("mlp-tiny"), wrapped)
