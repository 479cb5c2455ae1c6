"""The model of `lightspeed serve` in a worker process: built and planned there, its
answers shaped as in this process, its errors raised here as the same error, and a
worker that dies answered with a line that says so."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from lightspeed.errors import UnknownNameError, WorkloadError
from lightspeed.serving.serve import ServeSettings, close_engine, prepare
from lightspeed.serving.worker import prepare_worker
from lightspeed.workflows.serve_plan import read_latency

PROFILE = Path(__file__).parent.parent / "data" / "serving" / "mlp-tiny.json"
SETTINGS = ServeSettings(slo_s=0.2)


def test_the_worker_plans_and_answers_as_this_process_would() -> None:
    profile = read_latency(PROFILE)
    here = prepare("mlp-tiny", SETTINGS, profile=profile)
    lines: list[str] = []
    there = prepare_worker("mlp-tiny", SETTINGS, profile=profile, progress=lines.append)
    try:
        worker = there.engine._process  # type: ignore[attr-defined]
        assert worker.pid != os.getpid() and worker.is_alive()
        assert (there.max_batch, there.max_queue) == (here.max_batch, here.max_queue)
        assert there.engine.schema == here.engine.schema and there.engine.name == "mlp-tiny"
        samples = [here.engine.sample(i) for i in range(3)]
        ours, theirs = here.engine.run(samples), there.engine.run(samples)
        # the same shapes (the weights are each build's own random ones), the same
        # answer again for the same batch
        assert [a.shape for a in theirs] == [a.shape for a in ours] == [(10,)] * 3
        np.testing.assert_array_equal(np.stack(theirs), np.stack(there.engine.run(samples)))

        os.kill(worker.pid, signal.SIGKILL)
        with pytest.raises(WorkloadError, match="worker process ended"):
            there.engine.run(samples)
    finally:
        close_engine(there)
    assert not worker.is_alive()


def test_an_error_met_in_the_worker_is_raised_here() -> None:
    with pytest.raises(UnknownNameError, match="mlp-tinyy"):
        prepare_worker("mlp-tinyy", SETTINGS, profile=read_latency(PROFILE))
