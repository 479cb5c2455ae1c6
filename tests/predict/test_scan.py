"""BPPSA predicted: the scan's kernels counted, and the step with each RNN's backward
as a scan."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import lightspeed
from factories import FAKE_CPU, RunCli, rnn_tagger_workload
from lightspeed import Hardware
from lightspeed.errors import ConfigError
from lightspeed.facts.records import Phase
from lightspeed.hardware import catalog_hardware
from lightspeed.optimize.bppsa import scan_hidden_gradients
from lightspeed.predict.scan import RnnShape, on_scan_backward, predict_scan, scan_levels
from lightspeed.report.profile_json import load_profile, save_profile

H100 = catalog_hardware("h100-sxm")


@pytest.mark.parametrize(("steps", "batch", "hidden"), [(1, 1, 2), (5, 3, 4), (100, 2, 8)])
def test_the_scans_products_are_torchs_count(steps: int, batch: int, hidden: int) -> None:
    """The up- and down-sweeps' products, as predicted, are the FLOPs FlopCounterMode
    counts when `scan_hidden_gradients` runs (its vector adds aside)."""
    p = predict_scan(steps, batch, hidden, 3, H100)
    sweeps = [k for k in p.scan if "sweep" in k.name]
    assert len(sweeps) == p.levels == scan_levels(steps)
    adds = sum((1 << math.ceil(math.log2(steps + 1))) >> int(k.name.split()[-1]) for k in sweeps)
    products = sum(k.flops for k in sweeps) - adds * batch * hidden
    jacobians = torch.randn(steps, batch, hidden, hidden)
    with FlopCounterMode(display=False) as counter:
        scan_hidden_gradients(jacobians, torch.randn(steps, batch, hidden))
    initial = 2 * batch * hidden * hidden  # A₀ g₀
    assert counter.get_total_flops() == products + initial


def test_at_the_speed_of_light_alone_the_scan_never_wins() -> None:
    for steps in (10, 1000, 100_000):
        for hidden in (4, 32, 256):
            p = predict_scan(steps, 8, hidden, 16, H100)
            assert p.speedup < 1
            assert p.work_ratio > hidden / 4


def test_where_each_step_costs_a_kernels_overhead_the_scan_wins() -> None:
    p = predict_scan(10_000, 4, 16, 8, H100, per_kernel_s=5e-6)
    # Every op either side dispatches costs at least the overhead: 14 a step against
    # 21 a level of the scan's 28.
    assert p.ordinary_s >= (14 * 10_000 + 9) * 5e-6
    assert sum(k.count for k in p.ordinary) == 14 * 10_000 + 9
    assert sum(k.count for k in p.scan) == 21 * 28 + 96
    # Its products are small on an H100: the overhead is nearly all of it.
    assert p.scan_s < 1.05 * (21 * 28 + 96) * 5e-6
    assert p.speedup > 100
    with pytest.raises(ValueError, match="no backward"):
        predict_scan(0, 4, 16, 8, H100)


@pytest.fixture(scope="module")
def tagger_profile() -> lightspeed.Profile:
    return lightspeed.profile(rnn_tagger_workload(), budget_s=0.2, hardware=FAKE_CPU)


def test_the_step_with_the_scan(tagger_profile: lightspeed.Profile, tmp_path: Path) -> None:
    workload = rnn_tagger_workload()
    predicted = lightspeed.predict(tagger_profile, workload=workload, scan_backward=True)
    made = predicted.prediction
    assert made is not None and made.changes == {"scan-backward": "rnn"}
    (scan,) = made.scans
    assert (scan.module, scan.steps, scan.batch, scan.hidden, scan.input_size) == (
        "rnn",
        20,
        2,
        8,
        6,
    )
    assert scan.levels == 2 * math.ceil(math.log2(21))
    assert scan.predicted_s == pytest.approx(scan.measured_s * scan.scan_s / scan.ordinary_s)
    # The RNN's measured backward is replaced by its scan, nothing else changes.
    assert tagger_profile.step_time_s is not None and predicted.step_time_s is not None
    assert predicted.step_time_s == pytest.approx(
        tagger_profile.step_time_s - scan.measured_s + scan.predicted_s, rel=1e-9
    )
    path = tmp_path / "p.json"
    save_profile(predicted, path)
    assert load_profile(path).prediction == made


def test_a_fused_backward_is_replaced_by_the_scan_predicted_outright(
    tagger_profile: lightspeed.Profile,
) -> None:
    # As on a GPU, where the RNN's backward is one cuDNN op: the step-by-step count does
    # not describe it, so the scan is predicted on its own, each op at least the step's
    # time per op.
    ops = list(tagger_profile.ops)
    mine = [i for i, op in enumerate(ops) if op.module == "rnn" and op.phase is Phase.BACKWARD]
    ops[mine[0]] = dataclasses.replace(ops[mine[0]], name="aten::_cudnn_rnn_backward")
    fused = dataclasses.replace(tagger_profile, ops=tuple(ops))
    made = on_scan_backward(fused, [RnnShape("rnn", 20, 2, 6, 8)]).prediction
    assert made is not None
    (scan,) = made.scans
    assert tagger_profile.step_time_s is not None
    assert scan.per_kernel_s == pytest.approx(tagger_profile.step_time_s / len(ops))
    assert scan.ordinary_s == scan.measured_s
    assert scan.predicted_s == pytest.approx(scan.scan_s)
    alone = predict_scan(20, 2, 8, 6, fused.hardware, per_kernel_s=scan.per_kernel_s)
    assert scan.scan_s == pytest.approx(alone.scan_s)


def test_refusals(tagger_profile: lightspeed.Profile) -> None:
    with pytest.raises(ConfigError, match=r"no nn\.RNN to scan"):
        on_scan_backward(tagger_profile, [])


TAGGER_TARGET = """
import torch
from torch import nn
from lightspeed import Workload


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


tagger = Workload(
    name="tagger",
    model=Tagger,
    batch=lambda n: (torch.randn(30, n, 6), torch.randint(0, 3, (30, n))),
    loss=lambda m, b: nn.functional.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten()),
    batch_size=4,
)
"""


def test_cli(
    run_cli: RunCli, calibrated_cpu: Hardware, tagger_profile: lightspeed.Profile, tmp_path: Path
) -> None:
    target = tmp_path / "tagger.py"
    target.write_text(TAGGER_TARGET)
    html, out_json = tmp_path / "p.html", tmp_path / "p.json"
    code, out, err = run_cli(
        "predict",
        f"{target}:tagger",
        "--scan-backward",
        "--budget",
        "0.2",
        "--html",
        str(html),
        "--json",
        str(out_json),
    )
    assert code == 0, err
    assert "Backward as a parallel scan" in out
    assert "30×4, 8" in out  # time-major: T × B, H
    assert "Each RNN" in html.read_text()
    assert load_profile(out_json).prediction.scans[0].levels == 10  # type: ignore[union-attr]
    # A saved profile whose workload cannot be loaded here: one line, exit 2.
    saved = tmp_path / "saved.json"
    save_profile(tagger_profile, saved)
    code, _, err = run_cli("predict", str(saved), "--scan-backward")
    assert code == 2
    assert "a scanned backward runs the step's shapes again" in err
    assert len(err.strip().splitlines()) == 1
