"""lightspeed tune's checkpoint candidate: the modules a user names (`--checkpoint`, as
`lightspeed predict` takes them), and the reason it gives when it cannot run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from torch import nn

from factories import FAKE_CPU, ConvBlock, RunCli, convnet_workload, vgg_workload
from lightspeed.errors import ConfigError
from lightspeed.facts.profile import Profile
from lightspeed.facts.tuning import CandidateKind, Equivalence, Verdict
from lightspeed.report.profile_json import load_profile
from lightspeed.report.render_terminal import render_text
from lightspeed.report.tune_report import plan_kind, tune_document
from lightspeed.workflows import tune as tune_module
from lightspeed.workflows.profile import profile_shapes
from lightspeed.workflows.tune import tune
from lightspeed.workflows.tune_code import plan_code

COMMITTED = next((Path(__file__).parent / "data" / "profiles").glob("*.json"))


@pytest.fixture(scope="module")
def convnet_step() -> Profile:
    """The step of the ConvNet of four ConvBlocks in a Sequential (`blocks`), from its
    shapes on hardware with no calibration here (so nothing is timed)."""
    hardware = dataclasses.replace(FAKE_CPU, calibration=None)
    return profile_shapes(convnet_workload("sequential"), hardware=hardware)


def test_the_modules_named_resolve_as_predict_reads_them() -> None:
    workload = convnet_workload("sequential")

    def named(text: str) -> tuple[str, ...]:
        return tune_module.checkpointed_modules(workload, text)

    # 4 blocks: ⌈√4⌉ = 2 segments of 2, each recomputed as one.
    assert named("auto") == ("blocks.0:2", "blocks.2:4")
    assert named("blocks.*") == ("blocks.0", "blocks.1", "blocks.2", "blocks.3")
    assert named("blocks.3,stem") == ("stem", "blocks.3")  # in model order
    assert named("blocks.1:3,head") == ("blocks.1:3", "head")
    assert named("stem,ops+1:blocks.[01],ops:blocks.2") == (
        "stem",
        "ops+1:blocks.0",
        "ops+1:blocks.1",
        "ops:blocks.2",
    )
    looped = tune_module.checkpointed_modules(convnet_workload("modulelist"), "auto")
    assert looped == ("blocks.0", "blocks.1", "blocks.2", "blocks.3")
    # A model that is itself the stack: no STACK.I:J names its segments.
    bare = dataclasses.replace(workload, model=lambda: nn.Sequential(*map(ConvBlock, [8] * 4)))
    assert tune_module.checkpointed_modules(bare, "auto") == ("0", "1", "2", "3")


def test_modules_that_cannot_be_checkpointed_are_refused_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, run_cli: RunCli
) -> None:
    def measured(*args: object, **kwargs: object) -> Profile:
        raise AssertionError("nothing is measured for a bad --checkpoint")

    monkeypatch.setattr(tune_module, "profile", measured)
    workload = convnet_workload("sequential")
    with pytest.raises(ConfigError, match=r"'blockz\.1' names no module of ConvNet"):
        tune(workload, only=["checkpoint"], checkpoint="blockz.1")
    with pytest.raises(ConfigError, match=r"--checkpoint auto: .*\(--only amp\)"):
        tune(workload, only=["amp"], checkpoint="auto")
    code, _, err = run_cli("tune", "mlp-tiny", "--checkpoint", "nothing.here")
    assert code == 2 and "'nothing.here' names no module" in err


def test_the_checkpoint_candidate_wraps_the_modules_named(
    monkeypatch: pytest.MonkeyPatch, convnet_step: Profile
) -> None:
    # The plain step's profile stands in for the candidate's too: what is checked here
    # is which modules it wraps, its prediction and its equivalence check.
    monkeypatch.setattr(tune_module, "profile", lambda *args, **kwargs: convnet_step)
    found = tune(convnet_workload("sequential"), only=["checkpoint"], checkpoint="auto")
    (candidate,) = found.candidates
    assert candidate.kind is CandidateKind.CHECKPOINT
    assert candidate.arguments == ("blocks.0:2", "blocks.2:4")
    assert candidate.transform == "checkpoint(['blocks.0:2', 'blocks.2:4'])"
    assert candidate.equivalence is not None and candidate.equivalence.error == 0.0
    assert candidate.predicted_peak_bytes is not None
    chosen = dataclasses.replace(candidate, verdict=Verdict.KEPT)
    kept = dataclasses.replace(found, candidates=(chosen,), chosen=chosen)
    assert "checkpoint_model(model, ['blocks.0:2', 'blocks.2:4'])" in plan_code(kept)


def test_a_reason_names_its_candidate_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune_module, "profile", lambda *args, **kwargs: load_profile(COMMITTED))
    # VGGStyle's Sequentials mix convolutions, ReLUs and pools: no stack for the planner.
    found = tune(vgg_workload(), only=["checkpoint"])
    (skipped,) = found.candidates
    assert skipped.verdict is Verdict.SKIPPED
    assert skipped.reason.startswith("VGGStyle has no stack of repeated blocks")
    text = render_text(tune_document(found), width=200)
    assert "checkpoint: VGGStyle has no stack" in text and "checkpoint: checkpoint" not in text

    def broken() -> Equivalence:
        raise ConfigError("checkpoint: 'x' names no module of VGGStyle.")

    trial = tune_module._Trial(
        name="checkpoint",
        kind=CandidateKind.CHECKPOINT,
        transform="checkpoint(['x'])",
        changed=vgg_workload(),
        predicted_step_s=None,
        predicted_peak_bytes=None,
        check=broken,
    )
    failed = tune_module._run(trial, found.baseline, "cpu", 0.01, None)
    assert failed.verdict is Verdict.ERROR
    assert failed.reason == "'x' names no module of VGGStyle."


def test_the_planners_options_are_reported(
    monkeypatch: pytest.MonkeyPatch, convnet_step: Profile
) -> None:
    """Without modules named, the planner chooses; every option it weighed (whole blocks
    and op-level ones) is in the result, the terminal report and the HTML page."""
    from lightspeed.report import render_json
    from lightspeed.report.html import render_html

    monkeypatch.setattr(tune_module, "profile", lambda *args, **kwargs: convnet_step)
    found = tune(convnet_workload("sequential"), only=["checkpoint"])
    plans = found.checkpoint_plans
    assert sum(p.chosen for p in plans) == 1
    assert any(all(m.startswith("ops:") for m in p.modules) and p.modules for p in plans)
    assert () in [p.modules for p in plans]
    (candidate,) = found.candidates
    assert next(p for p in plans if p.chosen).modules == candidate.arguments
    doc = tune_document(found)
    text = render_text(doc, width=200)
    assert "Checkpoint plans weighed" in text and "ops:blocks.0" in text
    assert len(doc.data["checkpoint_plans"]) == len(plans)
    html = render_html(render_json.render(doc))
    assert "Checkpoint plans weighed" in html and "ops:blocks.0" in html
    # Blocks with their convolution recomputed too, a kind of their own in the table.
    deeper = next(p for p in plans if p.modules and p.modules[-1] == "ops+1:blocks.3")
    assert plan_kind(deeper.modules) == "ops + products" and "ops + products" in text
    assert plan_kind(("stem", "ops+1:blocks.3")) == "whole + ops + products"
    assert plan_kind(("stem", "ops:blocks.3")) == "whole + ops"
