"""Progress on long work: drawn on a terminal, absent from piped output."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from factories import run_in_terminal
from lightspeed import progress

LIGHTSPEED = [sys.executable, "-m", "lightspeed"]
PROFILE = ["profile", "mlp-tiny", "--hardware", "local", "--budget", "0.1", "--steps", "1"]


def test_stages_nest_and_are_told_to_listeners() -> None:
    seen: list[tuple[str, ...]] = []
    with (
        progress.listening(seen.append),
        progress.stage("profile"),
        progress.stage("timing the step"),
    ):
        pass
    assert seen == [("profile",), ("profile", "timing the step"), ("profile",), ()]
    with progress.stage("nobody listening"):
        pass
    assert len(seen) == 4


def test_a_stage_relabelled_and_a_count_advanced_by_many_are_told() -> None:
    seen: list[tuple[tuple[str, ...], tuple[int, int] | None]] = []
    with (
        progress.listening(lambda stages: seen.append((stages, progress.counted()))),
        progress.stage("reading: 0 of 2 traces"),
        progress.counting(10) as advance,
    ):
        advance(4)
        progress.relabel("reading: 1 of 2 traces")
    assert seen == [
        (("reading: 0 of 2 traces",), None),
        (("reading: 0 of 2 traces",), (0, 10)),
        (("reading: 0 of 2 traces",), (4, 10)),
        (("reading: 1 of 2 traces",), (4, 10)),
        ((), None),
    ]


def _a_workers_stage(detached: bool) -> None:
    if detached:
        progress.detach()
    with progress.stage("a worker's"):
        pass


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_detached_forked_process_tells_its_parents_listeners_nothing(tmp_path: Path) -> None:
    told = tmp_path / "told"

    def listener(stages: tuple[str, ...]) -> None:
        with told.open("a") as f:
            f.write(f"{os.getpid()} {'/'.join(stages)}\n")

    fork = multiprocessing.get_context("fork")
    workers = []
    with progress.listening(listener), progress.stage("the parent's"):
        for detached in (False, True):
            workers.append(fork.Process(target=_a_workers_stage, args=(detached,)))
            workers[-1].start()
            workers[-1].join()
    # Undetached, a worker calls the listeners it inherited (a display's: it would draw
    # from there); detached, it tells them nothing.
    here, undetached = os.getpid(), workers[0].pid
    assert told.read_text().splitlines() == [
        f"{here} the parent's",
        f"{undetached} the parent's/a worker's",
        f"{undetached} the parent's",
        f"{here} ",
    ]


@pytest.fixture
def env(calibrated_cpu: object, private_cache: Path) -> dict[str, str]:
    return {**os.environ, "LIGHTSPEED_CACHE_DIR": str(private_cache), "TERM": "xterm"}


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_a_terminal_sees_each_stage(env: dict[str, str]) -> None:
    code, out = run_in_terminal([*LIGHTSPEED, *PROFILE], env)
    assert code == 0
    for stage in ("building the model", "timing the step", "capturing the step's ops and memory"):
        assert stage in out
    assert "Speed of light" in out  # and then the report


def test_piped_output_has_no_progress(env: dict[str, str]) -> None:
    done = subprocess.run(
        [*LIGHTSPEED, *PROFILE], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0
    assert "Speed of light" in done.stdout
    for stream in (done.stdout, done.stderr):
        assert "timing the step" not in stream and "\x1b[" not in stream
