"""Import direction: every module imports only from its own layer or the layers below,
counting what it imports through others; no import cycles; the layers below `workload`
never load torch, so a saved profile or a trace is analysed without it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "src" / "lightspeed"
DATA = Path(__file__).parent / "data"
ALEXNET_TRACE = DATA / "traces" / "hta-a100-alexnet-benchmark.json.gz"

# Lowest first. A module belongs to the layer of the longest prefix that names it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "progress", "glossary"),
    ("dtypes",),
    ("facts",),
    ("rules",),
    ("document",),  # the report model: what analyses show, drawn by report/
    ("hardware", "hardware.catalog", "hardware.plausibility"),  # data and checks, no torch
    ("analysis",),
    ("predict",),  # what-ifs: Profile × change → Profile
    ("trace",),
    ("report",),
    ("history",),  # the results store: bench documents in SQLite
    # Below this line modules may load torch.
    ("workload",),
    ("optimize",),  # Workload → Workload transforms
    ("suite",),
    ("workload.targets", "workload.hf"),
    ("measure",),
    ("measure.distributed",),  # runs measure's step in N processes under torchrun
    (
        "hardware.calibrate",
        "hardware.bandwidth",
        "hardware.compute_kernels",
        "hardware.cache",
        "hardware.resolve",
    ),
    (
        "predict.shapes",
        "predict.whatif",
        "predict.encodings",
        "predict.checkpointing",
    ),  # predictions that run the step's shapes
    ("workflows",),
    ("serving",),  # the model server and load generator
    ("integrations",),  # callbacks for the training frameworks
    ("cli", "__main__"),
    ("",),  # the package root: its lazy facade names everything
)
TORCH_FREE_LAYERS = LAYERS.index(("workload",))


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> tuple[set[str], set[str]]:
    """(lightspeed modules, other top-level packages) that `path` imports anywhere in
    it: at the top, inside functions, and under TYPE_CHECKING alike."""
    own: set[str] = set()
    other: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module
            # `from lightspeed import suite` imports the module lightspeed.suite (and
            # its packages, which `Graph.package_edges` adds); other names, `base`.
            names = []
            for a in node.names:
                sub = root.parent.joinpath(*f"{base}.{a.name}".split("."))
                is_module = base.startswith("lightspeed") and (
                    sub.is_dir() or sub.with_suffix(".py").is_file()
                )
                names.append(f"{base}.{a.name}" if is_module else base)
        else:
            continue
        for name in names:
            (own if name.split(".")[0] == "lightspeed" else other).add(
                name if name.startswith("lightspeed") else name.split(".")[0]
            )
    return own, other


class Graph:
    """The import graph of a package tree: direct edges and what each module reaches."""

    def __init__(self, root: Path) -> None:
        self.edges: dict[str, set[str]] = {}
        self.external: dict[str, set[str]] = {}
        for path in sorted(root.rglob("*.py")):
            name = module_name(path, root)
            own, other = imports_of(path, root)
            self.edges[name] = {m for m in own if m != name}
            self.external[name] = other

    def package_edges(self, name: str) -> set[str]:
        """Direct imports plus the packages Python imports on the way to each
        (importing a.b.c runs a/__init__ and a/b/__init__; the root's facade excepted)."""
        result = set()
        for target in self.edges[name]:
            parts = target.split(".")
            result |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
        return result & set(self.edges)

    def reach(self, name: str) -> set[str]:
        seen: set[str] = set()
        todo = [name]
        while todo:
            for nxt in self.package_edges(todo.pop()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        seen.discard(name)
        return seen

    def cycles(self) -> list[list[str]]:
        """Strongly connected groups of two or more modules (direct imports only)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        found: list[list[str]] = []

        def visit(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            for w in sorted(self.edges[v] & set(self.edges)):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

        for v in sorted(self.edges):
            if v not in index:
                visit(v)
        return found


def layer_of(module: str) -> int:
    rel = module.removeprefix("lightspeed").removeprefix(".")
    best, best_len = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = rel == prefix or rel.startswith(prefix + ".") or prefix == ""
            if matches and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def violations(root: Path) -> Iterator[str]:
    """Every way the tree at `root` breaks the layering."""
    graph = Graph(root)
    for name in sorted(graph.edges):
        own = layer_of(name)
        reached = graph.reach(name)
        for target in sorted(reached):
            if layer_of(target) > own:
                yield f"{name} imports {target} (a higher layer), directly or through others"
        if own < TORCH_FREE_LAYERS:
            heavy = {m for m in reached | {name} if "torch" in graph.external[m]}
            if heavy:
                yield f"{name} loads torch through {', '.join(sorted(heavy))}"
    for group in graph.cycles():
        yield "import cycle: " + " → ".join(group)


def test_every_module_belongs_to_a_layer() -> None:
    graph = Graph(PACKAGE)
    unplaced = [m for m in graph.edges if m != "lightspeed" and layer_of(m) == len(LAYERS) - 1]
    assert unplaced == []


def test_layers_hold() -> None:
    assert list(violations(PACKAGE)) == []


def test_a_planted_transitive_import_is_caught(tmp_path: Path) -> None:
    """The catalog is allowed to import its own package; if it imported the local
    calibration, the trace reader's lookup of a GPU would load torch through it."""
    tree = tmp_path / "lightspeed"
    shutil.copytree(PACKAGE, tree)
    catalog = tree / "hardware" / "catalog.py"
    catalog.write_text(catalog.read_text() + "\nfrom lightspeed.hardware import resolve\n")
    found = list(violations(tree))
    assert any(
        v.startswith("lightspeed.hardware.catalog imports lightspeed.hardware.resolve")
        for v in found
    )
    # The report imports neither the catalog's module nor measure itself: only the
    # transitive closure sees that it now loads both, and torch with them.
    assert any(
        v.startswith("lightspeed.report.trace_report imports lightspeed.measure.") for v in found
    )
    assert "lightspeed.report.trace_report loads torch" in " ".join(found)


def test_a_planted_cycle_is_caught(tmp_path: Path) -> None:
    tree = tmp_path / "lightspeed"
    shutil.copytree(PACKAGE, tree)
    errors = tree / "errors.py"
    errors.write_text(errors.read_text() + "\nimport lightspeed.dtypes\n")
    assert "import cycle: lightspeed.dtypes → lightspeed.errors" in list(violations(tree))


# Each package of the layout and a module of it made to import above its layer.
PLANTED = [
    ("workload/workload.py", "lightspeed.measure.step"),
    ("measure/costs/flop_registry.py", "lightspeed.measure.distributed.torchrun"),
    ("measure/distributed/torchrun.py", "lightspeed.workflows.bench"),
    ("optimize/fusion/layers.py", "lightspeed.measure.timer"),
    ("workflows/tune.py", "lightspeed.cli.common"),
]


@pytest.mark.parametrize(("path", "target"), PLANTED)
def test_a_planted_import_in_each_package_is_caught(tmp_path: Path, path: str, target: str) -> None:
    tree = tmp_path / "lightspeed"
    shutil.copytree(PACKAGE, tree, ignore=shutil.ignore_patterns("__pycache__"))
    module = tree / path
    module.write_text(module.read_text() + f"\nimport {target}\n")
    name = "lightspeed." + path.removesuffix(".py").replace("/", ".")
    assert f"{name} imports {target} (a higher layer), directly or through others" in list(
        violations(tree)
    )


def _run_without_torch(code: str) -> str:
    """Run `code` in a fresh interpreter in which `import torch` fails."""
    blocker = "import sys; sys.modules['torch'] = None\n"
    done = subprocess.run(
        [sys.executable, "-c", blocker + code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_trace_analysis_imports_no_torch() -> None:
    out = _run_without_torch(
        "import lightspeed\n"
        f"t = lightspeed.load_traces([{str(ALEXNET_TRACE)!r}])\n"
        "a = lightspeed.analyse_traces(t)\n"
        "from lightspeed.report.trace_report import trace_data\n"
        "print(trace_data(a)['ranks'][0]['bound'])\n"
    )
    assert out.strip()


def test_saved_profile_loads_and_analyses_without_torch() -> None:
    out = _run_without_torch(
        "import lightspeed\n"
        f"p = lightspeed.load_profile({str(DATA / 'profiles' / 'mlp-tiny-schema1.json')!r})\n"
        "a = lightspeed.analyse(p)\n"
        "from lightspeed.report.profile_report import profile_data\n"
        "print(len(profile_data(a)['ops']), a.profile.workload.name)\n"
    )
    assert out.split()[1] == "mlp-tiny"
    assert int(out.split()[0]) > 0


@pytest.mark.parametrize("layer", [p for group in LAYERS[:TORCH_FREE_LAYERS] for p in group])
def test_torch_free_layer_imports_without_torch(layer: str) -> None:
    name = f"lightspeed.{layer}" if layer else "lightspeed"
    _run_without_torch(f"import {name}")


def test_the_optimize_facade_names_what_its_modules_define() -> None:
    import lightspeed.optimize as optimize

    assert sorted(optimize._EXPORTS) == sorted(optimize.__all__)
    for name in optimize.__all__:
        assert getattr(optimize, name).__name__ == name


def test_the_root_holds_its_nouns_and_measure_stays_small() -> None:
    """The package root keeps only torch-free vocabulary and the facade; a stage that
    outgrows one folder gets sub-packages (measure/costs, measure/distributed)."""
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(root) <= 10, root
    assert len(list((PACKAGE / "measure").glob("*.py"))) <= 20


def test_the_root_facade_names_what_its_modules_define() -> None:
    import importlib

    import lightspeed

    assert sorted(lightspeed._EXPORTS) == sorted(lightspeed.__all__)
    for name in ("bench", "tune", "sweep", "checkpoint_for_budget", "profile", "predict"):
        assert name in lightspeed.__all__
    for name in lightspeed.__all__:
        module = importlib.import_module(lightspeed._EXPORTS[name])
        assert getattr(lightspeed, name) is getattr(module, name), name
