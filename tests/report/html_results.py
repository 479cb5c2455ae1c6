"""Results the HTML report tests draw: a tiny profile, a bench run and real traces, as
the JSON objects lightspeed writes (made once per test module that asks)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

from factories import FAKE_CPU

DATA = Path(__file__).parent.parent / "data"
TRACES = DATA / "traces"
# One rank, and two ranks of one run.
ONE_RANK = TRACES / "hta-a100-alexnet-benchmark.json.gz"
TWO_RANKS = (
    TRACES / "hta-recsys-128ranks-sampled-rank0.json.gz",
    TRACES / "hta-recsys-128ranks-sampled-rank1.json.gz",
)
ONE_WITH_MATMULS = TRACES / "tracelens-h100-bert-small-inference.json.gz"


def fixed_clock(day: int = 1):  # type: ignore[no-untyped-def]
    return lambda: datetime.datetime(2026, 11, day, 12, 0, tzinfo=datetime.timezone.utc)


def as_json(doc: Any) -> dict[str, Any]:
    """A Document as the JSON object its file would hold (strict JSON, fixed date)."""
    from lightspeed.report import render_json

    return json.loads(render_json.dumps(render_json.render(doc, clock=fixed_clock())))


def tiny_profile() -> dict[str, Any]:
    """mlp-tiny profiled on the CPU, modelled on the test fixture's ceilings."""
    import lightspeed
    from lightspeed.report.profile_report import profile_document

    profile = lightspeed.profile("mlp-tiny", hardware=FAKE_CPU, steps=1, budget_s=0.1)
    return as_json(profile_document(lightspeed.analyse(profile)))


def predicted_profile(
    profile_doc: dict[str, Any], hardware: str, fuse: int | None = None
) -> dict[str, Any]:
    """The profile predicted on a catalog device (and `fuse` jobs fused)."""
    import lightspeed
    from lightspeed.hardware import catalog_hardware
    from lightspeed.predict.whatif import predict
    from lightspeed.report.profile_json import profile_from_doc
    from lightspeed.report.profile_report import profile_document

    predicted = predict(
        profile_from_doc(profile_doc), hardware=catalog_hardware(hardware), fuse=fuse
    )
    return as_json(profile_document(lightspeed.analyse(predicted)))


def bench_run(profile_doc: dict[str, Any]) -> dict[str, Any]:
    """A bench run of two results made from one profile (one of them failed)."""
    from lightspeed.facts.bench import BenchResult, BenchRun
    from lightspeed.report.bench_report import bench_document
    from lightspeed.report.profile_json import profile_from_doc

    profile = profile_from_doc(profile_doc)
    assert profile.timing is not None
    ran = BenchResult(
        workload=profile.workload, profile=profile, rounds=(profile.timing, profile.timing)
    )
    other = dataclasses.replace(profile.workload, name="other <b>model</b>")
    failed = BenchResult(workload=other, profile=None, failure="out of memory")
    run = BenchRun(results=(ran, failed), hardware=FAKE_CPU, size="tiny", rounds=2, threads=2)
    return as_json(bench_document(run))


def trace_result(*paths: Path) -> dict[str, Any]:
    """The trace analysis of `paths`, as `lightspeed trace --json` writes it."""
    from lightspeed import trace
    from lightspeed.report.trace_report import trace_document

    return as_json(trace_document(trace.analyse(list(paths))))


def tune_result() -> dict[str, Any]:
    """A tuning run of mlp-tiny as `lightspeed tune --json` writes it: one candidate kept,
    one slower, one skipped (the figures made up, the plain step profiled)."""
    import lightspeed
    from lightspeed.facts.tuning import Candidate, CandidateKind, Equivalence, Tuning, Verdict
    from lightspeed.report.tune_report import tune_document
    from lightspeed.suite import get

    baseline = lightspeed.profile(get("mlp-tiny"), hardware=FAKE_CPU, budget_s=0.05, steps=1)
    step = baseline.step_time_s or 1e-3
    check = Equivalence(
        check="gradients after one step", passed=True, error=0.0, tolerance=0.0, worst=""
    )
    kept = Candidate(
        name="amp-bf16", kind=CandidateKind.AMP, transform="autocast('bf16')",
        predicted_step_s=0.8 * step, predicted_peak_bytes=900_000, measured_step_s=0.85 * step,
        measured_peak_bytes=950_000, equivalence=check, verdict=Verdict.KEPT,
    )  # fmt: skip
    slower = dataclasses.replace(
        kept, name="checkpoint", kind=CandidateKind.CHECKPOINT, transform="checkpoint(['0'])",
        predicted_step_s=1.2 * step, measured_step_s=1.3 * step, verdict=Verdict.SLOWER,
    )  # fmt: skip
    skipped = Candidate(
        name="gist",
        kind=CandidateKind.GIST,
        reason="no ReLU or max-pool encoding frees memory here.",
    )
    tuning = Tuning(
        baseline=baseline, memory_budget_bytes=None, candidates=(kept, slower, skipped), chosen=kept
    )
    return as_json(tune_document(tuning))


def sweep_result() -> dict[str, Any]:
    """A small sweep of mlp-tiny as `lightspeed sweep --json` writes it."""
    from lightspeed.report.sweep_report import sweep_document
    from lightspeed.suite import get
    from lightspeed.workflows.sweep import sweep

    found = sweep(
        get("mlp-tiny"),
        "lr=loguniform(1e-4,1e-1) weight_decay=[0,0.1]",
        trials=6,
        k=3,
        steps=3,
        serial_sample=2,
    )
    return as_json(sweep_document(found))


def latency_result() -> dict[str, Any]:
    """mlp-tiny's forward at batch 1, 4 and 16 as `lightspeed serve-profile --json`
    writes it, on the test fixture's ceilings, predicted on an A100 too."""
    from lightspeed.hardware.catalog import catalog_hardware
    from lightspeed.measure.step import StepSettings
    from lightspeed.report.serving_report import latency_document
    from lightspeed.suite import get
    from lightspeed.workflows.latency import forecast_latency, latency_by_batch

    found = latency_by_batch(get("mlp-tiny"), [1, 4, 16], hardware=FAKE_CPU, budget_s=0.02)
    gpu = catalog_hardware("a100-40gb-sxm")
    forecast = forecast_latency(
        get("mlp-tiny"),
        found,
        hardware=FAKE_CPU,
        settings=StepSettings(),
        target=gpu,
        budget_s=0.02,
    )
    return as_json(latency_document(found, FAKE_CPU, forecast))


def plan_result() -> dict[str, Any]:
    """`lightspeed serve-plan --json` of the two sessions in tests/data/serving."""
    from lightspeed.predict.serving import one_model_per_gpu, plan, simulate
    from lightspeed.report.serving_report import plan_document
    from lightspeed.workflows.serve_plan import read_sessions

    sessions = read_sessions(Path(__file__).parents[1] / "data" / "serving" / "sessions.toml")
    served = plan(sessions)
    outcomes = simulate(served, sessions, duration_s=2.0)
    return as_json(plan_document(sessions, served, outcomes, one_model_per_gpu(sessions), 2.0))


def load_run(
    rate_per_s: float,
    *,
    ok: int,
    within: int,
    dropped: int = 0,
    errors: int = 0,
    latency_s: tuple[float, float, float] | None = (0.01, 0.02, 0.04),
    cpu: float = 0.2,
    lag_s: float = 0.001,
    details: tuple[str, ...] = (),
    lower_bound: float = 0.9,
) -> dict[str, Any]:
    """One run of a load test as `LoadResult.to_dict()` writes it: 10 s at `rate_per_s`
    against a 100 ms SLO, the figures made up (the lower bound given, not computed)."""
    offered = round(rate_per_s * 10)
    p50, p90, p99 = latency_s if latency_s is not None else (None, None, None)
    return {
        "offered": offered,
        "ok": ok,
        "within_slo": within,
        "dropped": dropped,
        "errors": errors,
        "slo_s": 0.1,
        "duration_s": 10.0,
        "offered_rate_per_s": offered / 10,
        "throughput_per_s": ok / 10,
        "goodput_per_s": within / 10,
        "fraction_within": within / offered,
        "within_lower_bound_99": lower_bound,
        "p50_s": p50,
        "p90_s": p90,
        "p99_s": p99,
        "generator_cpu": cpu,
        "lag_max_s": 2 * lag_s,
        "lag_p99_s": lag_s,
        "error_details": list(details),
    }


def load_of(runs: list[dict[str, Any]], max_rate: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `load` object of `lightspeed loadgen` (`serving.load.load_data`) around `runs`."""
    return {
        "target": {
            "url": "http://127.0.0.1:8000/predict",
            "model": "mlp-tiny",
            "in_process": False,
            "policy": "slo-aware",
            "max_batch": 32,
            "batch_timeout_ms": 5.0,
        },
        "slo_s": 0.1,
        "arrivals": "poisson",
        "duration_s": 10.0,
        "seed": 0,
        "runs": runs,
        "max_rate": max_rate,
    }


def search_load() -> dict[str, Any]:
    """A search from 100 req/s: 100 passes, 200 fails, 141.4 passes, 168.2 fails (out of
    probes before the bracket closed)."""
    probes = [
        (100.0, load_run(100.0, ok=1000, within=999, lower_bound=0.9935), True),
        (200.0, load_run(200.0, ok=1900, within=1500, dropped=100, latency_s=(0.05, 0.2, 0.9)),
         False),
        (141.42, load_run(141.42, ok=1414, within=1412, lower_bound=0.9951), True),
        (168.18, load_run(168.18, ok=1682, within=1600, latency_s=(0.03, 0.09, 0.3)), False),
    ]  # fmt: skip
    best = probes[2][1]
    found = {
        "target": 0.99,
        "confidence": 0.99,
        "rate_per_s": 141.42,
        "lower_bound": 0.9951,
        "converged": False,
        "result": best,
        "probes": [{"rate_per_s": r, "passed": p, "result": run} for r, run, p in probes],
    }
    return load_of([run for _, run, _ in probes], found)


def loadtest_result() -> dict[str, Any]:
    """`lightspeed loadgen --find-max-rate --json` of `search_load`."""
    from lightspeed.report.loadtest_report import loadtest_document

    return as_json(loadtest_document(search_load()))


GPU_DATA = Path(__file__).parent.parent / "data" / "gpu"


def trace_prediction_result() -> dict[str, Any]:
    """CUDA graphs predicted from an H200 trace of ResNet-50 in bf16, as `lightspeed
    predict --trace --cuda-graphs --json` writes it."""
    from lightspeed.report.trace_whatif_report import trace_prediction_document
    from lightspeed.trace.load import load_trace
    from lightspeed.trace.whatif import predict_trace

    trace = load_trace(GPU_DATA / "resnet50-bf16-cuda.pt.trace.json.gz")
    return as_json(trace_prediction_document([predict_trace(trace, cuda_graphs=True)]))
