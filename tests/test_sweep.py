"""`lightspeed sweep`: the search space read or refused in one line, the fused sweep
against the same trials run alone (same losses, same best), a diverging trial stopped
alone, the report and its JSON, and Optuna missing."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from factories import RunCli
from lightspeed.errors import ConfigError
from lightspeed.suite import get
from lightspeed.workflows.sweep import parse_space, run_alone, run_fused, sweep
from lightspeed.workload import Workload


def test_the_space_reads_ranges_and_choices() -> None:
    dims = parse_space(
        "lr=loguniform(1e-5, 1e-2) weight_decay=[0,0.01, 0.1] beta1=uniform(0.8,0.99)", "adamw"
    )
    assert [(d.name, d.kind) for d in dims] == [
        ("lr", "loguniform"),
        ("weight_decay", "choice"),
        ("beta1", "uniform"),
    ]
    assert (dims[0].low, dims[0].high) == (1e-5, 1e-2)
    assert dims[1].choices == (0.0, 0.01, 0.1)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ("momentum=[0.9]", "adamw has no hyper-parameter 'momentum'; it takes lr, beta1"),
        ("lr=loguniform(0,1)", "a log-uniform range must be above 0"),
        ("lr=uniform(1,0.1)", "LOW < HIGH"),
        ("lr=uniform(1)", "give two numbers"),
        ("lr=[a,b]", "'a' is not a number"),
        ("lr=[]", "list at least one value"),
        ("lr=[0.1] lr=[0.2]", "lr is given twice"),
        ("lr=normal(0,1)", "cannot read 'lr=normal(0,1)'"),
        ("   ", "give at least one hyper-parameter"),
    ],
)
def test_a_bad_space_is_refused_in_one_line(space: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--space") as caught:
        parse_space(space, "adamw")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_fused_sweep_finds_the_best_the_same_trials_find_alone() -> None:
    workload = get("mlp-tiny")
    found = sweep(
        workload,
        "lr=loguniform(1e-4,3e-2) weight_decay=[0,0.1]",
        trials=8,
        k=4,
        steps=6,
        seed=3,
        serial_sample=2,
    )
    assert [t.number for t in found.trials] == list(range(8))
    assert [t.group for t in found.trials] == [0] * 4 + [1] * 4
    alone = {
        t.number: run_alone(workload, t.params, t.number, steps=6, seed=3) for t in found.trials
    }
    for trial in found.trials:
        assert trial.loss is not None and alone[trial.number] is not None
        assert trial.loss == pytest.approx(alone[trial.number], rel=1e-4)
    assert found.best == min(alone, key=lambda n: alone[n] or math.inf)
    assert found.serial is not None and found.serial.trials == (0, 7)
    assert found.serial.losses == (alone[0], alone[7])
    assert found.speedup is not None and found.speedup > 0
    assert found.serial_estimate_s == pytest.approx(found.serial.mean_s * 8 + found.driver_s)


def _sgd_workload() -> Workload:
    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, 8), torch.randn(n, 1)

    return Workload(
        name="sgd-regression",
        model=model,
        batch=batch,
        loss=lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
        batch_size=16,
    )


def test_a_diverging_trial_stops_alone_and_the_others_match_their_lone_runs() -> None:
    workload = _sgd_workload()
    params = [{"lr": 0.05}, {"lr": 1e6}, {"lr": 0.01}]
    losses = run_fused(workload, params, [0, 1, 2], steps=8, seed=1)
    assert losses[1] is None
    assert run_alone(workload, params[1], 1, steps=8, seed=1) is None
    for j in (0, 2):
        assert losses[j] == pytest.approx(
            run_alone(workload, params[j], j, steps=8, seed=1), rel=1e-5
        )


def test_the_report_and_its_json(run_cli: RunCli, tmp_path: Path) -> None:
    out, page = tmp_path / "sweep.json", tmp_path / "sweep.html"
    code, text, err = run_cli(
        "sweep", "mlp-tiny", "--space", "lr=loguniform(1e-4,1e-2)", "--trials", "4", "--k", "2",
        "--steps", "2", "--serial-sample", "1", "--json", str(out), "--html", str(page),
    )  # fmt: skip
    assert code == 0, err
    for label in ("search space", "best", "wall time", "serial sweep", "Trials: best first"):
        assert label in text
    doc = json.loads(out.read_text())
    assert doc["document"] == "sweep" and len(doc["trials"]) == 4 and doc["k"] == 2
    assert doc["best"] in {t["number"] for t in doc["trials"]}
    html = page.read_text()
    assert 'data-chart="sweep-time"' in html and 'data-chart="sweep-lr"' in html


def test_bad_arguments_exit_2_in_one_line(run_cli: RunCli) -> None:
    code, _, err = run_cli("sweep", "mlp-tiny", "--space", "lr=[0.1]", "--trials", "0")
    assert code == 2 and "--trials 0 must be a whole number, at least 1" in err
    code, _, err = run_cli("sweep", "mlp-tiny", "--space", "lr=(0.1)")
    assert code == 2 and "cannot read" in err and len(err.strip().splitlines()) == 1


def test_without_optuna_the_sweep_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ConfigError, match=r"pip install 'lightspeed\[sweep\]'"):
        sweep(get("mlp-tiny"), "lr=[0.1]", trials=1, k=1, steps=1)


FAILING = """
import torch
from torch import nn
from lightspeed.workload import Workload

built = [0]


def model():
    built[0] += 1
    if built[0] > 4:
        raise RuntimeError("no more models")
    return nn.Linear(4, 2)


FAILS_LATE = Workload(
    name="fails-late",
    model=model,
    batch=lambda n: (torch.randn(n, 4), torch.randint(0, 2, (n,))),
    loss=lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
    batch_size=8,
)
"""


def test_a_sweep_that_fails_part_way_keeps_the_trials_it_finished(
    run_cli: RunCli, tmp_path: Path
) -> None:
    target = tmp_path / "failing.py"
    target.write_text(FAILING)
    out = tmp_path / "partial.json"
    code, _, err = run_cli(
        "sweep", f"{target}:FAILS_LATE", "--space", "lr=[0.1,0.01]", "--trials", "6",
        "--k", "2", "--steps", "2", "--json", str(out),
    )  # fmt: skip
    assert code == 2
    assert "no more models" in err and "stopped after 4 of 6 trials" in err
    lines = err.strip().splitlines()
    assert lines[0] == f"wrote {out}" and len(lines) == 2  # what was done, then one error
    assert lines[1].startswith("lightspeed: error: the sweep stopped after 4 of 6 trials:")
    doc = json.loads(out.read_text())
    assert len(doc["trials"]) == 4 and "stopped after 4 of 6 trials" in doc["failure"]
    assert all(t["loss"] is not None for t in doc["trials"])
