"""torch.compile as a transform: named, checked, and lazy (compiling itself is measured in
benchmarks/compile_step.py: minutes a model on a small CPU, too slow for the tests)."""

from __future__ import annotations

import pytest
import torch

from lightspeed.errors import ConfigError
from lightspeed.optimize.compile import compiled
from lightspeed.suite import get

# Importing torch.compile's machinery warns about a deprecated torch.jit helper.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")


def test_the_compiled_workload_wraps_the_same_parameters_without_compiling_yet() -> None:
    plain = get("mlp-tiny")
    changed = compiled(plain)
    assert changed.name == "mlp-tiny+compile" and changed.loss is plain.loss
    torch.manual_seed(0)
    expected = plain.model()
    torch.manual_seed(0)
    model = changed.model()
    # torch.compile returns the module wrapped; its parameters are the original's.
    assert type(model).__name__ == "OptimizedModule"
    for (name, a), (wrapped, b) in zip(
        expected.named_parameters(), model.named_parameters(), strict=True
    ):
        assert wrapped == f"_orig_mod.{name}" and torch.equal(a, b)
    assert compiled(plain, mode="max-autotune").name == "mlp-tiny+compile-max-autotune"


def test_an_unknown_mode_or_backend_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"not a torch\.compile mode; choose one of default"):
        compiled(get("mlp-tiny"), mode="max_autotune")
    with pytest.raises(ConfigError, match=r"backend 'nonsense' is not a torch\.compile backend"):
        compiled(get("mlp-tiny"), backend="nonsense")
    with pytest.raises(ConfigError, match="applies to the inductor backend only"):
        compiled(get("mlp-tiny"), backend="eager", mode="max-autotune")
