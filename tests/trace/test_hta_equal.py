"""Whole-trace figures equal to HolisticTraceAnalysis 0.5's, on the real traces in
tests/data: HTA's own temporal breakdowns, recorded by `benchmarks/hta_reference.py`
(HTA 0.5.0; `benchmarks/data/hta_reference.json`), as constants."""

from __future__ import annotations

import pytest
from trace_paths import trace

from lightspeed.trace import analyse_rank, load_trace

# trace → include_last_profiler_step → (idle %, compute %, non-compute %, span µs)
HTA_TEMPORAL = {
    "hta-a100-alexnet-benchmark": {False: (99.49, 0.08, 0.43, 12996011)},
    "hta-a100-cuda-event-sync": {False: (78.71, 18.63, 2.66, 263)},
    "hta-a100-ddp-train-rank0of2": {
        False: (77.78, 17.26, 4.97, 435586),
        True: (76.68, 17.11, 6.21, 660550),
    },
    "hta-mi250-minitoy-train": {False: (98.53, 1.08, 0.39, 8911)},
    "hta-mtia-inference-rank0": {False: (4.34, 94.66, 1.00, 443275)},
    "hta-recsys-128ranks-sampled-rank0": {
        False: (53.56, 17.71, 28.74, 600058),
        True: (55.21, 17.20, 27.59, 1222847),
    },
    "hta-recsys-128ranks-sampled-rank1": {
        False: (54.72, 22.57, 22.72, 600674),
        True: (52.89, 22.09, 25.02, 1231186),
    },
    "hta-v100-ddp-cnn-train-rank0": {
        False: (2.63, 96.75, 0.62, 384634),
        True: (2.53, 96.85, 0.62, 480029),
    },
    "tracelens-h100-bert-small-inference": {False: (93.50, 6.45, 0.05, 3907)},
}
CASES = [(name, last) for name, by in HTA_TEMPORAL.items() for last in by]


@pytest.mark.parametrize(("name", "include_last_step"), CASES)
def test_whole_trace_temporal_breakdown_is_htas(name: str, include_last_step: bool) -> None:
    idle, compute, non_compute, span_us = HTA_TEMPORAL[name][include_last_step]
    t = analyse_rank(load_trace(trace(name)), include_last_step=include_last_step).whole.temporal
    assert t.total_s == pytest.approx(span_us * 1e-6)
    # HTA rounds its percentages to two decimals.
    assert 100 * t.idle_s / t.total_s == pytest.approx(idle, abs=0.005)
    assert 100 * t.compute_s / t.total_s == pytest.approx(compute, abs=0.005)
    assert 100 * (t.total_s - t.idle_s - t.compute_s) / t.total_s == pytest.approx(
        non_compute, abs=0.005
    )
