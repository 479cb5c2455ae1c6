"""lightspeed tune: every candidate predicted, checked and measured, side by side; a
candidate that fails its check is reported failed and never kept."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from factories import RunCli, VGGStyle, printed_labels, vgg_workload
from lightspeed import glossary
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.tuning import (
    Candidate,
    CandidateKind,
    Equivalence,
    Tuning,
    Verdict,
    kind_named,
)
from lightspeed.measure.equivalence import gradients_match
from lightspeed.optimize.encodings import GistMaxPool2d, GistReLU
from lightspeed.report.tune_report import COLUMNS, tune_document
from lightspeed.workflows import tune as tune_module
from lightspeed.workflows.tune import tune
from lightspeed.workflows.tune_code import plan_code


@pytest.fixture(scope="module")
def tuned() -> object:
    return tune(vgg_workload(), only=["checkpoint", "gist"], hardware=None, budget_s=0.05)


@pytest.mark.usefixtures("calibrated_cpu")
def test_each_candidate_is_predicted_checked_and_measured(tuned: object) -> None:
    found = {c.name: c for c in tuned.candidates}  # type: ignore[attr-defined]
    assert set(found) == {"gist"} | ({"checkpoint"} & set(found))
    gist = found["gist"]
    assert gist.transform.startswith("gist([") and "features.4" in gist.transform
    assert gist.equivalence is not None and gist.equivalence.passed
    assert gist.equivalence.error == 0.0  # bit for bit
    assert gist.predicted_peak_bytes is not None and gist.measured_peak_bytes is not None
    assert gist.measured_step_s is not None and gist.predicted_step_s is None
    assert gist.kind is CandidateKind.GIST
    assert gist.verdict in {Verdict.KEPT, Verdict.FASTER, Verdict.SLOWER}
    doc = tune_document(tuned)  # type: ignore[arg-type]
    assert doc.kind == "tune" and doc.data["candidates"][0]["name"]
    missing = {label for label in printed_labels(doc) if glossary.lookup(label) is None}
    assert missing == set()


@pytest.mark.usefixtures("calibrated_cpu")
def test_a_candidate_that_changes_the_gradients_is_failed_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(workload, baseline, budget):  # type: ignore[no-untyped-def]
        inner = workload.loss
        changed = dataclasses.replace(workload, loss=lambda m, b: inner(m, b) * 0.5)
        return [
            tune_module._Trial(
                name="gist",
                kind=CandidateKind.GIST,
                transform="halved loss",
                changed=changed,
                predicted_step_s=None,
                predicted_peak_bytes=None,
                check=lambda: gradients_match(workload, changed),
            )
        ]

    monkeypatch.setattr(tune_module, "_gist", broken)
    found = tune(vgg_workload(), only=["gist"], budget_s=0.05)
    (candidate,) = found.candidates
    assert candidate.verdict is Verdict.FAILED_CHECK and found.chosen is None
    assert (
        "gradients after one step" in candidate.reason
        and "over the tolerance 0" in candidate.reason
    )


@pytest.mark.usefixtures("calibrated_cpu")
def test_mixed_precision_measured_slower_is_never_kept(tuned: object) -> None:
    base = tuned.baseline  # type: ignore[attr-defined]
    step = base.step_time_s
    passed = Equivalence(check="loss curve", passed=True, error=0.1, tolerance=0.3, worst="3")
    bf16 = Candidate(
        name="amp-bf16",
        kind=CandidateKind.AMP,
        predicted_step_s=step / 2,  # predicted twice as fast …
        measured_step_s=step * 1.5,  # … measured slower
        equivalence=passed,
    )

    def kept(measured: Candidate) -> object:
        judged = tune_module._judged(measured, base, None)
        return tune_module._kept(base, None, [judged])

    found = kept(bf16)
    assert found.chosen is None and found.candidates[0].verdict is Verdict.SLOWER  # type: ignore[attr-defined]
    within_drift = dataclasses.replace(bf16, measured_step_s=step / 1.02)
    assert kept(within_drift).chosen is None  # type: ignore[attr-defined]
    faster = kept(dataclasses.replace(bf16, measured_step_s=step / 1.2))
    assert faster.chosen.name == "amp-bf16" and faster.chosen.verdict is Verdict.KEPT  # type: ignore[attr-defined]


def test_an_unknown_candidate_is_refused() -> None:
    with pytest.raises(ConfigError, match="--only compile: not a candidate"):
        tune(vgg_workload(), only=["compile"])


@pytest.mark.usefixtures("calibrated_cpu")
def test_cli_writes_the_tuning_as_json(
    run_cli: RunCli, tmp_path: Path, calibrated_cpu: Hardware
) -> None:
    path, plan = tmp_path / "tune.json", tmp_path / "plan.py"
    code, out, err = run_cli(
        "tune", "mlp-tiny", "--only", "gist", "--hardware", "local", "--budget", "0.05",
        "--json", str(path), "--emit", str(plan), "--html", str(tmp_path / "tune.html"),
    )  # fmt: skip
    assert code == 0, err
    page = (tmp_path / "tune.html").read_text()
    assert "Tune: mlp-tiny" in page and "Why not" in page
    assert plan.read_text().startswith("# lightspeed tune mlp-tiny: no candidate was")
    doc = json.loads(path.read_text())
    assert doc["document"] == "tune" and doc["kept"] is None
    (gist,) = doc["candidates"]
    assert gist["verdict"] == Verdict.SKIPPED.value and "frees memory" in gist["reason"]
    assert "Why not" in out


@pytest.mark.usefixtures("calibrated_cpu")
def test_cli_refuses_a_bad_memory_budget(run_cli: RunCli) -> None:
    code, _, err = run_cli("tune", "mlp-tiny", "--memory-budget", "lots")
    assert code == 2 and err.count("\n") == 1 and "is not a size" in err


def tuning_keeping(kind: CandidateKind, name: str, transform: str, tuned: object) -> object:
    arguments = tuple(re.findall(r"'([^']+)'", transform))
    kept = Candidate(
        name=name,
        kind=kind,
        transform=transform,
        arguments=arguments,
        measured_step_s=0.01,
        verdict=Verdict.KEPT,
    )
    return dataclasses.replace(tuned, candidates=(kept,), chosen=kept)  # type: ignore[type-var]


@pytest.mark.usefixtures("calibrated_cpu")
def test_the_kept_checkpoint_runs_as_plain_pytorch_in_a_users_script(tuned: object) -> None:
    code = plan_code(
        tuning_keeping(
            CandidateKind.CHECKPOINT,
            "checkpoint",
            "checkpoint(['features.0', 'features.5'])",
            tuned,
        )
    )  # type: ignore[arg-type]
    assert "kept checkpoint" in code and "lightspeed" not in code.split("\n", 1)[1]
    torch.manual_seed(0)
    plain, ours = VGGStyle(), VGGStyle()
    ours.load_state_dict(plain.state_dict())
    exec(compile(code, "plan.py", "exec"), {"model": ours})
    x = torch.randn(2, 3, 32, 32)
    for model in (plain, ours):
        model(x).square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), ours.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad), name


@pytest.mark.usefixtures("calibrated_cpu")
def test_segments_gist_and_amp_emit_code_that_compiles(tuned: object) -> None:
    gist = (CandidateKind.GIST, "gist", "gist(['features.3', 'features.4'])")
    fp16 = (CandidateKind.AMP, "amp-fp16", "autocast('fp16')")
    for kind, name, transform in (
        (CandidateKind.CHECKPOINT, "checkpoint", "checkpoint(['features.0:2'])"),
        gist,
        (CandidateKind.AMP, "amp-bf16", "autocast('bf16')"),
        fp16,
        (
            CandidateKind.AMP_CHECKPOINT,
            "amp-bf16+checkpoint",
            "checkpoint(autocast(workload, 'bf16'), ['features.0'])",
        ),
    ):
        code = plan_code(tuning_keeping(kind, name, transform, tuned))  # type: ignore[arg-type]
        compile(code, "plan.py", "exec")
        assert f"kept {name}" in code
    gist_code = plan_code(tuning_keeping(*gist, tuned))  # type: ignore[arg-type]
    model = VGGStyle()
    exec(compile(gist_code, "plan.py", "exec"), {"model": model})
    assert isinstance(model.features[3], GistReLU) and isinstance(model.features[4], GistMaxPool2d)
    assert "GradScaler" in plan_code(tuning_keeping(*fp16, tuned))  # type: ignore[arg-type]
    nothing = dataclasses.replace(tuned, chosen=None)  # type: ignore[type-var]
    assert "no candidate was" in plan_code(nothing)  # type: ignore[arg-type]


@pytest.mark.usefixtures("calibrated_cpu")
def test_amp_and_checkpoint_that_each_passed_are_tried_together(tuned: object) -> None:
    from factories import FAKE_CPU
    from lightspeed.suite import get
    from lightspeed.workflows.profile import profile

    workload = get("gpt2-tiny")
    baseline = profile(workload, hardware=FAKE_CPU, budget_s=0.05, steps=1)
    amp = Candidate(name="amp-bf16", kind=CandidateKind.AMP, arguments=("bf16",))
    plan = Candidate(name="checkpoint", kind=CandidateKind.CHECKPOINT, arguments=("blocks.0",))
    assert tune_module._combined(workload, baseline, {CandidateKind.AMP: amp}) is None
    both = tune_module._combined(
        workload, baseline, {CandidateKind.AMP: amp, CandidateKind.CHECKPOINT: plan}
    )
    assert both is not None and both.name == "amp-bf16+checkpoint"
    assert both.kind is CandidateKind.AMP_CHECKPOINT
    assert both.arguments == ("bf16", "blocks.0")
    assert both.changed.name == "gpt2-tiny+amp-bf16+checkpoint"
    assert both.predicted_step_s is not None and both.predicted_peak_bytes is not None
    kept = tuning_keeping(
        CandidateKind.AMP_CHECKPOINT, "amp-bf16+checkpoint", "x(['bf16', 'blocks.0'])", tuned
    )
    code = plan_code(kept)  # type: ignore[arg-type]
    assert "torch.utils.checkpoint" in code and "torch.autocast" in code


def test_mixed_precision_names_the_layer_sizes_to_pad(tuned: object) -> None:
    def unaligned() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(64, 100), torch.nn.ReLU(), torch.nn.Linear(100, 8)
        )

    workload = dataclasses.replace(vgg_workload(), model=unaligned)
    pads = tune_module._padding(workload, "bf16")
    assert pads == (
        "pad 0.out_features 100 → 104 (+4.00 % work) for tensor cores",
        "pad 2.in_features 100 → 104 (+4.00 % work) for tensor cores",
    )

    def needs_data() -> torch.nn.Module:
        model = unaligned()
        model[0].weight.data.fill_(float(torch.ones(1).item()))
        return model

    assert tune_module._padding(dataclasses.replace(workload, model=needs_data), "bf16") == ()
    bf16 = Candidate(
        name="amp-bf16", kind=CandidateKind.AMP, verdict=Verdict.SLOWER, suggestions=pads
    )
    doc = tune_document(dataclasses.replace(tuned, candidates=(bf16,)))  # type: ignore[type-var]
    assert "Shapes to pad (by hand)" in printed_notes(doc)
    assert doc.data["candidates"][0]["suggestions"] == list(pads)


def printed_notes(doc: object) -> set[str]:
    from lightspeed.document import Notes

    return {
        block.title or ""
        for section in doc.sections  # type: ignore[attr-defined]
        for block in section.blocks
        if isinstance(block, Notes)
    }


@pytest.mark.usefixtures("calibrated_cpu")
def test_the_optimize_package_names_each_transform_and_a_budget_plans_checkpointing() -> None:
    import lightspeed.optimize as optimize
    from lightspeed.suite import get
    from lightspeed.workflows.tune import checkpoint_for_budget

    assert optimize.autocast(get("mlp-tiny"), "bf16").name == "mlp-tiny+amp-bf16"
    assert optimize.gist(vgg_workload()).name.endswith("+gist")
    assert optimize.checkpoint.__module__ == "lightspeed.optimize.checkpointing"
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        optimize.nothing  # noqa: B018
    workload = get("gpt2-tiny")
    plain = tune_module.profile(workload, budget_s=0.05)
    assert plain.memory is not None
    budget = plain.memory.peak_bytes - plain.memory.activations_bytes // 2
    changed = checkpoint_for_budget(workload, budget, budget_s=0.05)
    assert changed.name == "gpt2-tiny+checkpoint"
    assert checkpoint_for_budget(workload, plain.memory.peak_bytes * 2, budget_s=0.05) is workload
    with pytest.raises(ConfigError, match="fits"):
        checkpoint_for_budget(workload, 1024, budget_s=0.05)


@pytest.mark.usefixtures("calibrated_cpu")
def test_fusion_of_a_sweeps_jobs_is_predicted_checked_and_measured_per_job() -> None:
    from lightspeed.suite import get

    found = tune(get("mlp-tiny"), only=["fuse"], jobs=4, budget_s=0.05)
    (fused,) = found.candidates
    assert fused.name == "fuse4" and fused.kind is CandidateKind.FUSE
    assert fused.transform == "fuse(workload, 4)"
    assert fused.equivalence is not None and fused.equivalence.passed
    assert fused.equivalence.error <= 1e-4
    assert fused.predicted_step_s is not None and fused.measured_step_s is not None
    # The step is a job's share: a quarter of a fused step, which trains 4 jobs.
    assert fused.profile is not None and fused.profile.step_time_s is not None
    assert fused.measured_step_s == pytest.approx(fused.profile.step_time_s / 4)
    assert fused.verdict in {Verdict.KEPT, Verdict.FASTER, Verdict.SLOWER}
    doc = tune_document(found)
    missing = {label for label in printed_labels(doc) if glossary.lookup(label) is None}
    assert missing == set()
    if fused.verdict is Verdict.KEPT:
        code = plan_code(found)
        assert "lightspeed.fuse(workload, 4" in code
        compile(code, "plan.py", "exec")


def test_fusion_needs_the_number_of_jobs() -> None:
    with pytest.raises(ConfigError, match="--only fuse: say how many jobs"):
        tune(vgg_workload(), only=["fuse"])
    with pytest.raises(ConfigError, match="--jobs 1: fusion needs 2 jobs or more"):
        tune(vgg_workload(), only=["fuse"], jobs=1)


def test_a_candidate_known_by_its_name_alone_has_its_kind() -> None:
    names = ("amp-bf16", "amp-fp16", "checkpoint", "gist", "fuse4", "amp-bf16+checkpoint")
    assert [kind_named(name) for name in names] == [
        CandidateKind.AMP,
        CandidateKind.AMP,
        CandidateKind.CHECKPOINT,
        CandidateKind.GIST,
        CandidateKind.FUSE,
        CandidateKind.AMP_CHECKPOINT,
    ]
    assert CandidateKind.AMP_CHECKPOINT.parts == {CandidateKind.AMP, CandidateKind.CHECKPOINT}


def test_the_html_report_captions_the_candidates_as_the_terminal_does() -> None:
    from lightspeed.document import Table
    from lightspeed.report import render_json
    from lightspeed.report.html import render_html
    from lightspeed.report.html.markup import text
    from lightspeed.report.profile_json import load_profile

    baseline = load_profile(next((Path(__file__).parent / "data" / "profiles").glob("*.json")))
    fused = Candidate(name="fuse4", kind=CandidateKind.FUSE, verdict=Verdict.SLOWER)
    gist = Candidate(name="gist", kind=CandidateKind.GIST, verdict=Verdict.SLOWER)
    for candidate, fuse_note in ((fused, True), (gist, False)):
        tuning = Tuning(
            baseline=baseline, memory_budget_bytes=None, candidates=(candidate,), chosen=None
        )
        doc = tune_document(tuning)
        (caption,) = (
            block.caption
            for section in doc.sections
            for block in section.blocks
            if isinstance(block, Table) and block.columns == COLUMNS
        )
        assert ("fuseK:" in str(caption)) == fuse_note
        assert f"<caption>{text(caption)}</caption>" in render_html(render_json.render(doc))


def test_the_candidates_table_fits_80_columns_with_its_headings_and_figures_whole() -> None:
    from lightspeed.report.profile_json import load_profile
    from lightspeed.report.render_terminal import render_text

    baseline = load_profile(next((Path(__file__).parent / "data" / "profiles").glob("*.json")))
    passed = Equivalence(check="gradients", passed=True, error=0.0, tolerance=0.0, worst="")

    def measured(name: str, kind: CandidateKind, verdict: Verdict) -> Candidate:
        return Candidate(
            name=name,
            kind=kind,
            predicted_step_s=0.0123,
            measured_step_s=0.0234,
            predicted_peak_bytes=99_210_000,
            measured_peak_bytes=99_210_000,  # 94.61 MiB
            equivalence=passed,
            verdict=verdict,
        )

    candidates = (
        measured("amp-bf16", CandidateKind.AMP, Verdict.SLOWER),
        Candidate(name="checkpoint", kind=CandidateKind.CHECKPOINT, verdict=Verdict.SKIPPED),
        measured("amp-bf16+checkpoint", CandidateKind.AMP_CHECKPOINT, Verdict.FAILED_CHECK),
    )
    tuning = Tuning(baseline=baseline, memory_budget_bytes=None, candidates=candidates, chosen=None)
    text = render_text(tune_document(tuning), width=80)
    assert max(map(len, text.splitlines())) <= 80
    lines = text.splitlines()
    (header,) = [row for row in lines if "candidate" in row and "outcome" in row]
    for heading in ("candidate", "pred. step", "step", "speed-up", "peak", "outcome"):
        assert f" {heading} " in header, heading
    rows = [row for row in lines if "12.3 ms" in row or "skipped" in row]
    assert len(rows) == 3
    for row in (rows[0], rows[2]):
        # 0.0234 s → 23.4 ms; 99_210_000 B / 2**20 = 94.61 MiB
        assert "12.3 ms" in row and "23.4 ms" in row and "94.61 MiB" in row
    assert "slower" in rows[0] and "skipped" in rows[1] and "failed check" in rows[2]
    # The free-text column gives way: the combination's name is cut, never to "…".
    assert "amp-bf16 " in rows[0] and "checkpoint" in rows[1] and "…" in rows[2]
