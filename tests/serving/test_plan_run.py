"""A serving plan run for real (`lightspeed serve-plan --run`): the targets a
SESSIONS.toml names, and tiny models sharing a CPU worker process standing for a GPU."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from lightspeed.errors import ConfigError
from lightspeed.predict.serving import SessionOutcome, one_model_per_gpu, plan, simulate
from lightspeed.report.html.plan_page import plan_page
from lightspeed.report.serving_report import plan_document
from lightspeed.serving.plan_run import run_plan
from lightspeed.workflows.serve_plan import read_sessions, read_targets

SERVING = Path(__file__).parents[1] / "data" / "serving"


def sessions_toml(tmp_path: Path, *tables: str) -> Path:
    path = tmp_path / "sessions.toml"
    path.write_text("\n".join(f"[[session]]\n{t}" for t in tables), "utf-8")
    return path


def session(name: str, rate: float, slo_ms: float, target: str | None = None) -> str:
    latency = (SERVING / f"{name}.json").as_posix()
    line = f'target = "{target}"\n' if target is not None else ""
    return f'name = "{name}"\nlatency = "{latency}"\nrate = {rate}\nslo_ms = {slo_ms}\n{line}'


def test_read_targets_keeps_suite_names_and_takes_files_relative_to_the_toml(
    tmp_path: Path,
) -> None:
    path = sessions_toml(
        tmp_path,
        session("mlp-tiny", 10, 100, target="mlp-tiny"),
        session("ncf-tiny", 10, 100, target="models/m.py:MODEL"),
        session("resnet18-tiny", 10, 100),
    )
    assert read_targets(path) == {
        "mlp-tiny": "mlp-tiny",
        "ncf-tiny": f"{tmp_path / 'models' / 'm.py'}:MODEL",
    }
    assert [s.name for s in read_sessions(path)] == ["mlp-tiny", "ncf-tiny", "resnet18-tiny"]


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ((session("mlp-tiny", 10, 100) + "target = 3\n",), "session 1's target must be"),
        ((session("mlp-tiny", 10, 100) + 'target = " "\n',), "session 1's target must be"),
        (
            (session("mlp-tiny", 10, 100, "mlp-tiny"), session("mlp-tiny", 10, 100, "mlp-tiny")),
            "two sessions are named 'mlp-tiny'",
        ),
        ((), "no [[session]] tables"),
    ],
)
def test_read_targets_refuses_in_one_line(
    tmp_path: Path, tables: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")) as caught:
        read_targets(sessions_toml(tmp_path, *tables))
    assert "\n" not in str(caught.value)


def test_a_session_without_a_target_cannot_run(tmp_path: Path) -> None:
    path = sessions_toml(tmp_path, session("mlp-tiny", 10, 100))
    sessions = read_sessions(path)
    with pytest.raises(ConfigError, match="session 'mlp-tiny' has no target; add target"):
        run_plan(plan(sessions), sessions, read_targets(path), duration_s=1.0)


def test_two_tiny_models_sharing_a_worker_answer_within_their_slos(tmp_path: Path) -> None:
    path = sessions_toml(
        tmp_path,
        session("mlp-tiny", 100, 100, target="mlp-tiny"),
        session("ncf-tiny", 60, 100, target="ncf-tiny"),
    )
    sessions = read_sessions(path)
    served = plan(sessions)
    assert [len(gpu.shares) for gpu in served.gpus] == [2]  # one worker, shared
    measured = run_plan(served, sessions, read_targets(path), duration_s=2.0, seed=1)
    assert not multiprocessing.active_children()  # the workers are gone
    assert [o.session for o in measured] == ["mlp-tiny", "ncf-tiny"]
    for o in measured:
        assert o.answered is not None and o.p99_s is not None
        assert 0 < o.within_slo <= o.answered <= o.requests
        assert o.answered == o.requests  # nothing dropped or lost
        assert o.fraction_within >= 0.9, o  # ≥ 99 % is for the benchmark, on a quiet host

    simulated = simulate(served, sessions, duration_s=2.0)
    baseline = one_model_per_gpu(sessions)
    plain = plan_document(sessions, served, simulated, baseline, 2.0)
    assert "measured" not in plain.data and "run_s" not in plain.data
    assert all(set(o) == {"session", "requests", "within_slo"} for o in plain.data["outcomes"])
    doc = plan_document(sessions, served, simulated, baseline, 2.0, measured=measured, run_s=2.0)
    assert doc.data["run_s"] == 2.0
    assert [m["answered"] for m in doc.data["measured"]] == [o.answered for o in measured]
    page = plan_page(doc.data)
    assert ("measured", "Measured") in page.nav and len(page.figures["ls-chart-1"]["data"]) == 2
    assert ("measured", "Measured") not in plan_page(plain.data).nav


def test_measured_outcomes_show_beside_the_simulated_ones() -> None:
    sessions = read_sessions(SERVING / "sessions.toml")
    served = plan(sessions)
    simulated = simulate(served, sessions, duration_s=1.0)
    measured = [
        SessionOutcome(session=s.name, requests=10, within_slo=9, answered=10, p99_s=0.2)
        for s in sessions
    ]
    doc = plan_document(sessions, served, simulated, 1, 1.0, measured=measured, run_s=1.0)
    assert doc.data["measured"][0] == {
        "session": "encoder",
        "requests": 10,
        "within_slo": 9,
        "answered": 10,
        "p99_s": 0.2,
    }
    page = plan_page(doc.data)
    assert ("measured", "Measured") in page.nav
    assert "90.0%" in page.sections[-1] and "200 ms" in page.sections[-1]
