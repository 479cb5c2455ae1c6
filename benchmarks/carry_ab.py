"""Two versions of `predict.carry`'s rules on the same measurements: a change to the
rules judged without the machine's drift between runs.

    PYTHONPATH=src .venv/bin/python benchmarks/carry_ab.py collect DIR --rounds 2
    PYTHONPATH=src .venv/bin/python benchmarks/carry_ab.py compare DIR --before REV

`collect` profiles each workload (the suite's tiny ones whose step runs on fake tensors,
`predict_changes.BATCH_WORKLOADS`, or `--outside` for `third_party.EXAMINED`) at its
batch size B, runs the step at 2B and 4B on fake tensors, times one by one the kernels
the change alters (what `lightspeed.predict` does), and profiles the step at 2B and 4B;
everything is written under DIR. `compare` carries each saved profile over to 2B and 4B
with the rules of `src/lightspeed/predict/carry.py` at git revision REV and with the
working tree's, against the saved profile at that size: predicted / measured − 1, the
median over rounds. One thread.
"""

from __future__ import annotations

import argparse
import importlib.util
import pickle
import statistics
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType

import torch

import lightspeed
from lightspeed.measure.op_bench import time_ops
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.predict import carry
from lightspeed.predict.shapes import settings_of
from lightspeed.report.profile_json import load_profile, save_profile
from lightspeed.suite import get
from predict_changes import BATCH_WORKLOADS
from third_party import EXAMINED, outside_workload

FACTORS = (2, 4)


def collect(out: Path, names: list[str], rounds: int, outside: bool, budget_s: float) -> None:
    """Profiles, changed shapes, kernel times and measured changed steps, under `out`."""
    for r in range(rounds):
        for name in names:
            workload = outside_workload(name) if outside else get(name)
            measured = lightspeed.profile(workload, budget_s=budget_s)
            settings = settings_of(measured)
            here = out / name
            here.mkdir(parents=True, exist_ok=True)
            save_profile(measured, here / f"r{r}_m.json")
            seen = {carry.op_key(op) for op in measured.ops}
            for factor in FACTORS:
                changed = workload.with_batch_size(workload.batch_size * factor)
                shapes = profile_shape_only(changed, measured.hardware, settings)
                new = {carry.op_key(op) for op in shapes.ops} - seen
                names_new = {key[0] for key in new}
                after = time_ops(changed, settings, new.__contains__)
                before = time_ops(
                    workload, settings, lambda k, n=names_new, s=seen: k in s and k[0] in n
                )
                actual = lightspeed.profile(changed, budget_s=budget_s)
                save_profile(shapes, here / f"r{r}_s{factor}.json")
                save_profile(actual, here / f"r{r}_a{factor}.json")
                (here / f"r{r}_k{factor}.pickle").write_bytes(pickle.dumps((before, after)))
            print(f"round {r + 1}: {name} done", flush=True)


def rules_at(revision: str) -> ModuleType:
    """`predict/carry.py` as it was at git `revision`, imported on its own."""
    text = subprocess.run(
        ["git", "show", f"{revision}:src/lightspeed/predict/carry.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "carry_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("carry_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compare(out: Path, revision: str) -> None:
    """Each saved workload's error at 2B and 4B under both rules, and their medians."""
    rules = {revision: rules_at(revision), "now": carry}
    errors: dict[tuple[str, int], dict[str, float]] = {}
    for here in sorted(p for p in out.iterdir() if p.is_dir()):
        for factor in FACTORS:
            found: dict[str, list[float]] = {label: [] for label in rules}
            for m in sorted(here.glob("r*_m.json")):
                r = m.name.split("_")[0]
                measured = load_profile(m)
                shapes = load_profile(here / f"{r}_s{factor}.json")
                actual = load_profile(here / f"{r}_a{factor}.json")
                times = pickle.loads((here / f"{r}_k{factor}.pickle").read_bytes())
                assert actual.step_time_s
                for label, module in rules.items():
                    predicted = module.carry_over(measured, shapes, {}, (), times)
                    found[label].append(predicted.step_time_s / actual.step_time_s)
            errors[(here.name, factor)] = {k: statistics.median(v) - 1 for k, v in found.items()}
            row = "  ".join(f"{k} {e:+7.1%}" for k, e in errors[(here.name, factor)].items())
            print(f"{here.name:26s} ×{factor}  {row}")
    for label in rules:
        every = [abs(e[label]) for e in errors.values()]
        print(f"{label}: median |error| {statistics.median(every):.1%}, worst {max(every):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    made = sub.add_parser("collect")
    made.add_argument("dir", type=Path)
    made.add_argument("--rounds", type=int, default=2)
    made.add_argument("--budget", type=float, default=0.5)
    made.add_argument("--outside", action="store_true", help="third_party.EXAMINED models")
    judged = sub.add_parser("compare")
    judged.add_argument("dir", type=Path)
    judged.add_argument("--before", required=True, help="git revision of the other rules")
    args = parser.parse_args()
    if args.command == "collect":
        torch.set_num_threads(1)
        names = list(EXAMINED if args.outside else BATCH_WORKLOADS)
        collect(args.dir, names, args.rounds, args.outside, args.budget)
    else:
        compare(args.dir, args.before)


if __name__ == "__main__":
    main()
