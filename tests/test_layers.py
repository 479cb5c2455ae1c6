"""Import direction: analysis and report never run models; measure never renders."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "lightspeed"

# What each layer may import from lightspeed (besides itself and the shared leaves).
LEAVES = {"errors", "dtypes", "workload"}
ALLOWED = {
    "measure": {"hardware.model", "suite"},
    "hardware": {"measure.device", "measure.timer"},
    "analysis": {"hardware", "measure", "trace"},  # facts only; checked below for execution
    "report": {"analysis", "hardware", "measure", "trace"},
    "suite": set(),
    "trace": set(),
}
# Modules that execute models: the pure layers may use their dataclasses, not call them.
EXECUTING = {"lightspeed.measure.step", "lightspeed.measure.timing"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("lightspeed")
        ):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("lightspeed")}
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports(layer: str) -> None:
    allowed = {f"lightspeed.{m}" for m in ALLOWED[layer] | LEAVES | {layer}} | {"lightspeed"}
    for path in (PACKAGE / layer).rglob("*.py"):
        for module in imports_of(path):
            ok = any(module == a or module.startswith(a + ".") for a in allowed)
            assert ok, f"{path.relative_to(PACKAGE)} imports {module}"


def test_analysis_does_not_execute_models() -> None:
    for path in (PACKAGE / "analysis").rglob("*.py"):
        assert not imports_of(path) & EXECUTING, path
