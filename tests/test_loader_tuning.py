"""The data loader tuned against the loop's measured wait for data: the loop measured
batch by batch, the search over worker counts, and what the report says."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from factories import RunCli, printed_labels
from lightspeed import glossary
from lightspeed.errors import ConfigError, WorkloadError
from lightspeed.facts.device import Device
from lightspeed.facts.tuning import LoaderOptions, LoaderRun, LoaderTuning, Tuning
from lightspeed.measure.data_loading import time_loader
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.report.profile_json import load_profile
from lightspeed.report.tune_report import tune_document
from lightspeed.workflows import loader_tuning as loader_tuning_module
from lightspeed.workflows.loader_tuning import tune_loader
from lightspeed.workflows.tune import tune
from lightspeed.workflows.tune_code import plan_code
from lightspeed.workload import Workload

# The benchmarks' loader workloads: an MLP fed by a DataLoader of synthetic samples.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from loading_workloads import FEATURES, Samples, mlp, workload_on


def test_the_loop_takes_each_step_a_new_batch_across_epochs() -> None:
    seen: list[int] = []

    class Counted(Samples):
        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            seen.append(i)
            return super().__getitem__(i)

    workload = workload_on(Counted(100))  # 2 batches an epoch: 64, then 36
    prepared = prepare(workload, StepSettings())
    run = time_loader(prepared, LoaderOptions(), steps=5)
    # The first batch, then 5 timed: 3 epochs, every sample loaded once an epoch.
    assert len(seen) == 300 and sorted(seen) == sorted(list(range(100)) * 3)
    assert run.steps == 5 and run.threads == torch.get_num_threads()
    # Samples a second counts the short batches as short: the timed 36, 64, 36, 64, 36.
    assert run.samples_per_s * run.loop_s * 5 == pytest.approx(2 * 64 + 3 * 36)
    assert run.loop_s == pytest.approx(run.wait_s + run.compute_s)


def test_a_loader_that_fails_or_yields_nothing_is_the_workloads_error() -> None:
    prepared = prepare(workload_on(Samples(0)), StepSettings())
    with pytest.raises(WorkloadError, match=r"loader\(batch_size, in the step's process\) raised"):
        time_loader(prepared, LoaderOptions(), steps=1)
    empty = dataclasses.replace(workload_on(Samples(1)), loader=lambda batch_size, **o: [])
    with pytest.raises(WorkloadError, match="its loader yields no batch"):
        time_loader(prepare(empty, StepSettings()), LoaderOptions(), steps=1)

    class Broken(Samples):
        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            raise OSError("sample 3 is unreadable")

    prepared = prepare(workload_on(Broken(10)), StepSettings())
    with pytest.raises(WorkloadError, match="sample 3 is unreadable"):
        time_loader(prepared, LoaderOptions(), steps=1)


def test_a_workload_without_a_loader_is_refused_with_the_fix() -> None:
    plain = Workload(
        name="no-loader",
        model=mlp,
        batch=lambda n: (torch.randn(n, FEATURES), torch.randint(0, 10, (n,))),
        loss=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),
    )
    with pytest.raises(ConfigError, match="has no data loader to tune: give the Workload"):
        tune_loader(plain)
    with pytest.raises(ConfigError, match="--only loader: workload 'no-loader' has no data"):
        tune(plain, only=["loader"])
    with pytest.raises(ConfigError, match="loader must be callable"):
        Workload(name="x", model=mlp, batch=plain.batch, loss=plain.loss, loader=3)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sleepy() -> LoaderTuning:
    # About 32 ms to load a batch of 64 in the step's process against a step of about
    # 10 ms: the loop waits for data until enough workers sleep side by side. Three
    # steps' worth, not two: two workers then still wait and four hide the load with a
    # quarter to spare, so the kept setting is never one that hides it only just (a
    # just-hidden load reads as waiting in some steps on a noisy machine).
    return tune_loader(workload_on(Samples(4096, 5e-4)), steps=15)


def test_workers_remove_a_sleeping_datasets_wait_and_its_diagnosis(sleepy: LoaderTuning) -> None:
    plain, kept = sleepy.runs[0], sleepy.kept
    assert plain.options == LoaderOptions() and plain.predicted_loop_s is None
    assert sleepy.bound_before == "data-loading" and "data-loading" in sleepy.findings_before
    assert kept.options.num_workers >= 2 and kept.options.persistent_workers
    assert sleepy.wait_removed is not None and sleepy.wait_removed >= 0.8
    assert sleepy.bound_after != "data-loading"
    assert "data-loading" not in sleepy.findings_after
    # Workers doubled while they helped (then a deeper prefetch at the best number),
    # each predicted from the loader without workers.
    workers = [r.options.num_workers for r in sleepy.runs[1:] if r.options.prefetch_factor == 2]
    assert workers[0] == 1 and all(b in (a, 2 * a) for a, b in itertools.pairwise(workers))
    for run in sleepy.runs[1:]:
        w = run.options.num_workers
        assert run.predicted_loop_s == pytest.approx(max(plain.compute_s, plain.wait_s / w))
    assert kept.loop_s == min(r.loop_s for r in sleepy.runs)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_the_report_json_and_emitted_code_carry_the_loader(
    sleepy: LoaderTuning, tmp_path: Path
) -> None:
    labels = printed_labels(tune_document(_tuning_with(sleepy)))
    assert {label for label in labels if glossary.lookup(label) is None} == set()
    code = plan_code(_tuning_with(sleepy))
    kept = sleepy.kept.options
    assert f"num_workers={kept.num_workers}" in code and "persistent_workers=True" in code
    dataset = Samples(8)
    namespace = {"dataset": dataset, "batch_size": 4}
    exec(compile(code.split("\n", 1)[1], "plan.py", "exec"), namespace)
    loader = namespace["loader"]
    assert isinstance(loader, DataLoader) and loader.num_workers == kept.num_workers
    torch.set_num_threads(sleepy.runs[0].threads)


def _tuning_with(loading: LoaderTuning) -> Tuning:
    """A tuning run of a saved profile's workload that tuned only its loader."""
    baseline = load_profile(next((Path(__file__).parent / "data" / "profiles").glob("*.json")))
    return Tuning(
        baseline=baseline, memory_budget_bytes=None, candidates=(), chosen=None, loading=loading
    )


def fake_runs(monkeypatch: pytest.MonkeyPatch, loop_by_workers: dict[int, float]) -> None:
    """time_loader replaced by a CPU that loses speed past two workers: the loop takes
    `loop_by_workers[w]` whatever the threads, with a wait of 80 ms without workers."""

    def fake(prepared, options, *, steps, threads=None, predicted_loop_s=None):  # type: ignore[no-untyped-def]
        loop = loop_by_workers[options.num_workers]
        wait = 0.08 if options.num_workers == 0 else loop / 2
        return LoaderRun(
            options=options,
            threads=threads or 2,
            steps=steps,
            first_batch_s=0.0,
            wait_s=wait,
            compute_s=loop - wait,
            loop_s=loop,
            samples_per_s=64 / loop,
            predicted_loop_s=predicted_loop_s,
        )

    monkeypatch.setattr(loader_tuning_module, "time_loader", fake)
    monkeypatch.setattr(
        loader_tuning_module, "_diagnosis", lambda prepared, options, threads: ("compute", ())
    )
    monkeypatch.setattr(loader_tuning_module.os, "cpu_count", lambda: 2)


def test_workers_that_compete_for_the_cores_stop_the_search_at_the_best_trade_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_runs(monkeypatch, {0: 0.1, 1: 0.06, 2: 0.05, 4: 0.07, 8: 0.09, 16: 0.2})
    found = tune_loader(workload_on(Samples(256)), max_workers=16)
    workers = [r.options.num_workers for r in found.runs]
    # 1, 2 help; 4 and 8 do not: the search stops there, then tries a deeper prefetch at 2.
    assert sorted(set(workers)) == [0, 1, 2, 4, 8] and 16 not in workers
    assert found.kept.options.num_workers == 2
    assert found.runs[-1].options.prefetch_factor == 4
    # On 2 cores with 2 step threads, each worker count is also tried on spare cores.
    assert {r.threads for r in found.runs if r.options.num_workers == 1} == {2, 1}
    assert "compete with the step for the CPU's 2 cores" in found.note


def test_a_loop_that_does_not_wait_for_data_tries_no_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_runs(monkeypatch, {0: 10.0})
    found = tune_loader(workload_on(Samples(256)))
    assert len(found.runs) == 1 and found.chosen == 0
    assert "nothing to gain" in found.note and plan_code_is_silent(found)


def plan_code_is_silent(found: LoaderTuning) -> bool:
    return "DataLoader" not in plan_code(_tuning_with(found))


def test_only_a_gpu_step_tries_pinned_memory() -> None:
    assert loader_tuning_module._thread_counts(2, 1, 2, Device.CPU) == [2, 1]
    assert loader_tuning_module._thread_counts(2, 1, 2, Device.CUDA) == [2]
    assert loader_tuning_module._thread_counts(1, 4, 2, Device.CPU) == [1]


@pytest.mark.usefixtures("calibrated_cpu")
def test_cli_tunes_a_target_files_loader(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The search measured in a model of a 2-core CPU (the measurement is tested above).
    fake_runs(monkeypatch, {0: 0.1, 1: 0.06, 2: 0.05, 4: 0.07, 8: 0.09})
    target = tmp_path / "target.py"
    target.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).resolve().parent.parent / "benchmarks")!r})
            from loading_workloads import Samples, workload_on
            WORKLOAD = workload_on(Samples(512))
            """
        )
    )
    path = tmp_path / "tune.json"
    code, out, err = run_cli(
        "tune", f"{target}:WORKLOAD", "--only", "loader", "--budget", "0.05", "--hardware", "local",
        "--json", str(path), "--html", str(tmp_path / "tune.html"),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(path.read_text())
    loading = doc["loading"]
    assert loading["runs"][0]["options"] == {"num_workers": 0, "pin_memory": False}
    assert loading["runs"][0]["setting"] == "in the step's process"
    assert loading["bound_before"] and "Data loading" in out
    assert loading["runs"][loading["kept"]]["options"]["num_workers"] == 2
    assert 'id="loading"' in (tmp_path / "tune.html").read_text()


def test_an_80_column_terminal_shows_every_setting_apart() -> None:
    from lightspeed.report.render_terminal import render_text

    settings = [(0, None, 2), (1, 2, 2), (1, 2, 1), (8, 4, 1)]
    runs = tuple(
        LoaderRun(
            options=LoaderOptions(num_workers=w, persistent_workers=w > 0, prefetch_factor=p),
            threads=t,
            steps=20,
            first_batch_s=0.05,
            wait_s=0.03 / (w + 1),
            compute_s=0.01,
            loop_s=0.01 + 0.03 / (w + 1),
            samples_per_s=3000.0,
            predicted_loop_s=None if w == 0 else 0.01,
        )
        for w, p, t in settings
    )
    found = LoaderTuning(runs=runs, chosen=3, bound_before="data-loading", bound_after="compute")
    text = render_text(tune_document(_tuning_with(found)), width=80)
    for shown in (
        "0 w; 2 thr",
        "1 w pf2 pers; 2 thr",
        "1 w pf2 pers; 1 thr",
        "8 w pf4 pers; 1 thr",
    ):
        assert shown in text
    assert "pred. loop" in text and "(88.9% removed)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
