"""The results store and comparisons: runs kept whole under concurrent writers and a
killed writer, foreign or newer files refused untouched, and a regression flagged only
beyond both the threshold and the noise between rounds."""

from __future__ import annotations

import json
import multiprocessing
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from factories import FAKE_CPU, RunCli
from lightspeed import history
from lightspeed.analysis.bench_compare import Verdict, compare_runs
from lightspeed.history import StoreError
from lightspeed.report import render_json
from lightspeed.report.bench_report import bench_document
from lightspeed.workflows.bench import bench
from lightspeed.workload import Workload


def _document(steps: dict[str, float], spread: float = 0.01, threads: int = 2) -> dict[str, Any]:
    """A bench JSON document with these step times (seconds) and round spreads."""
    return {
        "schema_version": 2,
        "document": "bench",
        "created_at": "2026-11-24T12:00:00+00:00",
        "lightspeed_version": "0.1.0",
        "size": "tiny",
        "rounds": 3,
        "threads": threads,
        "environment": {"torch_version": "2.13.0", "git_commit": "abc"},
        "hardware": {"name": "test CPU", "id": "local"},
        "results": [
            {
                "workload": {"name": name, "device": "cpu", "dtype": "fp32"},
                "timing": {"samples_per_s": 1 / step},
                "totals": {"efficiency": 0.5, "mfu": 0.1},
                "memory": {"peak_bytes": 1000},
                "step_s": step,
                "round_spread": spread,
                "failure": None,
            }
            for name, step in steps.items()
        ],
    }


def test_a_run_is_kept_and_read_back(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    first = history.record(store, _document({"a": 0.010, "b": 0.020}))
    second = history.record(store, _document({"a": 0.011}))
    assert (first, second) == (1, 2)
    runs = history.runs(store)
    assert [(r["id"], r["workloads"], r["machine"], r["threads"]) for r in runs] == [
        (1, 2, "test CPU", 2),
        (2, 1, "test CPU", 2),
    ]
    assert [r["step_s"] for r in history.workload_history(store, "a")] == [0.010, 0.011]
    assert history.run_document(store)["results"][0]["step_s"] == 0.011
    assert history.run_document(store, 1)["run_id"] == 1
    with pytest.raises(StoreError, match="holds no run 7"):
        history.run_document(store, 7)


def test_a_change_must_beat_both_the_threshold_and_the_noise() -> None:
    before = _document({"steady": 0.100, "noisy": 0.100, "faster": 0.100}, spread=0.0)
    after = _document({"steady": 0.110, "noisy": 0.110, "faster": 0.080}, spread=0.0)
    after["results"][1]["round_spread"] = 0.2  # its rounds drifted by 20 %
    comparison = compare_runs(before, after, threshold=0.05)
    verdicts = {c.workload: c.verdict for c in comparison.changes}
    assert verdicts == {
        "steady": Verdict.REGRESSION,
        "noisy": Verdict.UNCHANGED,
        "faster": Verdict.IMPROVEMENT,
    }
    assert comparison.fails


BUSY = {"load_average": 9.0, "cpu_count": 2}  # a noise check on a loaded 2-CPU machine
BUSY_SAYS = "round 2: the machine is busy: load average 9.0 on 2 CPUs"


def test_a_regression_where_a_run_was_noisy_is_not_judged_and_never_fails() -> None:
    before = _document({"same": 0.100, "worse": 0.100, "quiet": 0.100}, spread=0.0)
    after = _document({"same": 0.199, "worse": 0.150, "quiet": 0.150}, spread=0.0)
    # Run b's noise check failed for "same" in its second round (the field a bench
    # writes now); run a's for "worse", read from its rounds' checks as in a file written
    # before that field.
    after["results"][0]["noise_warnings"] = [BUSY_SAYS]
    before["results"][1]["rounds"] = [{"noise": None}, {"noise": {**BUSY, "steal_share": 0}}]
    comparison = compare_runs(before, after, threshold=0.05)
    same, worse, quiet = comparison.changes
    assert (same.verdict, worse.verdict, quiet.verdict) == (
        Verdict.NOT_JUDGED,
        Verdict.NOT_JUDGED,
        Verdict.REGRESSION,
    )
    assert (same.a_noise, same.b_noise) == ((), (BUSY_SAYS,))
    assert (worse.a_noise, worse.b_noise) == ((BUSY_SAYS,), ())
    assert comparison.regressions == (quiet,) and comparison.fails
    # Without the quiet regression, nothing fails.
    del before["results"][2], after["results"][2]
    assert not compare_runs(before, after, threshold=0.05).fails


def test_compare_says_which_run_was_noisy_and_exits_0_on_its_regression(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store = tmp_path / "h.sqlite"
    history.record(store, _document({"mlp-tiny": 0.010, "gpt2-tiny": 0.020}, spread=0.0))
    noisy = _document({"mlp-tiny": 0.0199, "gpt2-tiny": 0.020}, spread=0.0)  # +99 %
    noisy["results"][0]["noise_warnings"] = [BUSY_SAYS]
    history.record(store, noisy)
    code, out, err = run_cli("compare", "--store", str(store), "--fail-on-regression")
    assert code == 0, err
    said = " ".join((out + err).split())  # as one line, however the terminal wraps it
    assert said.count("not judged:") == 1
    assert f"mlp-tiny: not judged: run 2 was noisy ({BUSY_SAYS})" in said
    code, out, _ = run_cli("compare", "--store", str(store), "--json=-")
    data = json.loads(out)
    assert (data["regressions"], data["not_judged"], data["fails"]) == ([], ["mlp-tiny"], False)


def test_runs_of_other_machines_or_threads_are_compared_with_a_warning_and_never_fail() -> None:
    before = _document({"a": 0.100}, threads=2)
    after = _document({"a": 0.200}, threads=1)
    comparison = compare_runs(before, after)
    assert comparison.regressions and not comparison.fails
    assert comparison.warnings == ("the runs used different thread counts (2, 1)",)


def _sleeper(delay_s: float) -> Workload:
    """A step that takes `delay_s` seconds of sleep (a regression injected into it)."""

    def loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        time.sleep(delay_s)
        return model(batch).square().mean()

    return Workload(
        name="sleeper",
        model=lambda: torch.nn.Linear(4, 4),
        batch=lambda n: torch.ones(n, 4),
        loss=loss,
        batch_size=2,
    )


def _bench_json(delay_s: float, tmp_path: Path, name: str) -> Path:
    run = bench([_sleeper(delay_s)], FAKE_CPU, rounds=3, budget_s=0.15)
    document = render_json.render(bench_document(run))
    # Whether the machine running the tests is busy is not what these runs test (a
    # noisy run's regression is not judged): take their noise checks as passed.
    for result in document["results"]:
        result["noise_warnings"] = []
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def test_same_code_flags_nothing_and_an_injected_delay_is_flagged(
    run_cli: RunCli, tmp_path: Path
) -> None:
    store = tmp_path / "h.sqlite"
    threshold = 0.05
    base = _bench_json(0.02, tmp_path, "base.json")
    again = _bench_json(0.02, tmp_path, "again.json")
    slowed = _bench_json(0.02 * (1 + 2 * threshold), tmp_path, "slowed.json")
    for path in (base, again, slowed):
        history.record(store, json.loads(path.read_text()))
    flags = ("--store", str(store), "--fail-on-regression", "--json=-")
    code, out, _ = run_cli("compare", "1", "2", *flags)
    assert code == 0 and json.loads(out)["regressions"] == []
    code, out, _ = run_cli("compare", "1", "3", *flags)
    assert code == 1 and json.loads(out)["regressions"] == ["sleeper"]
    # The last two runs by default; a baseline file for CI.
    code, out, _ = run_cli("compare", *flags)
    assert code == 1 and json.loads(out)["a"] == "run 2"
    code, out, _ = run_cli("compare", "--baseline", str(base), *flags)
    assert code == 1 and json.loads(out)["b"] == "run 3"


def _writer(store: str, count: int, tag: str) -> None:
    for i in range(count):
        history.record(Path(store), _document({f"{tag}-{i}": 0.01, "shared": 0.02}))


def test_two_processes_writing_at_once_keep_every_run(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(str(store), 15, t)) for t in "xy"]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=120)
        assert w.exitcode == 0
    runs = history.runs(store)
    assert len(runs) == 30 and all(r["workloads"] == 2 for r in runs)
    assert len(history.workload_history(store, "shared")) == 30


def test_a_writer_killed_mid_run_leaves_every_committed_run_whole(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    many = {f"w{i}": 0.01 for i in range(200)}  # a large run: a wide window to die in
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from lightspeed import history
        from test_history import _document
        while True:
            history.record(Path({str(store)!r}), _document({many!r}))
            print("committed", flush=True)
        """
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None
    for _ in range(3):
        assert writer.stdout.readline().strip() == "committed"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    with sqlite3.connect(store) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    runs = history.runs(store)
    assert len(runs) >= 3
    assert all(r["workloads"] == 200 for r in runs)  # no run half-written
    assert all(len(history.run_document(store, r["id"])["results"]) == 200 for r in runs)


@pytest.mark.parametrize("kind", ["text", "other-sqlite", "newer"])
def test_a_file_that_is_no_store_or_is_newer_is_refused_untouched(
    run_cli: RunCli, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "file"
    if kind == "text":
        path.write_text("not a database\n" * 100)
        expected = "is not a lightspeed results store"
    elif kind == "other-sqlite":
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE TABLE notes (text TEXT)")
        connection.close()
        expected = "is not a lightspeed results store"
    else:
        history.record(path, _document({"a": 0.01}))
        with sqlite3.connect(path) as connection:
            connection.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        connection.close()
        expected = "schema 99, newer than this lightspeed reads"
    before = path.read_bytes()
    for command in (("history",), ("compare", "1", "2"), ("bench", "mlp-tiny")):
        code, _, err = run_cli(*command, "--store", str(path))
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, command
    assert path.read_bytes() == before


def test_an_older_store_is_migrated_in_a_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration machinery, with a schema 2 that adds a column: a store of schema 1
    is brought up to date with its runs intact, and a migration that fails leaves it as
    it was."""
    store = tmp_path / "h.sqlite"
    history.record(store, _document({"a": 0.01}))

    def add_note(connection: sqlite3.Connection) -> None:
        connection.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    def half_then_fail(connection: sqlite3.Connection) -> None:
        connection.execute("ALTER TABLE runs ADD COLUMN note TEXT")
        raise RuntimeError("migration failed")

    monkeypatch.setattr(history, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(history.MIGRATIONS, 1, half_then_fail)
    with pytest.raises(RuntimeError, match="migration failed"):
        history.runs(store)
    with sqlite3.connect(store) as connection:
        columns = {r[1] for r in connection.execute("PRAGMA table_info(runs)")}
        version = connection.execute("SELECT value FROM meta WHERE key='schema_version'")
        assert "note" not in columns and version.fetchone() == ("1",)
    connection.close()

    monkeypatch.setitem(history.MIGRATIONS, 1, add_note)
    assert [r["workloads"] for r in history.runs(store)] == [1]
    with sqlite3.connect(store) as connection:
        columns = {r[1] for r in connection.execute("PRAGMA table_info(runs)")}
        version = connection.execute("SELECT value FROM meta WHERE key='schema_version'")
        assert "note" in columns and version.fetchone() == ("2",)
    connection.close()


def test_the_history_tables_show_each_runs_short_commit_at_80_columns(tmp_path: Path) -> None:
    from lightspeed.report.history_report import runs_document, workload_history_document
    from lightspeed.report.render_terminal import render_text

    store = tmp_path / "h.sqlite"
    document = _document({"a": 0.01})
    document["environment"]["git_commit"] = "0123456789abcdef0123456789abcdef01234567+"
    document["hardware"]["name"] = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
    history.record(store, document)
    document["environment"]["git_commit"] = "fedcba9876543210fedcba9876543210fedcba98"
    history.record(store, document)
    for doc in (
        runs_document(history.runs(store), str(store)),
        workload_history_document("a", history.workload_history(store, "a"), str(store)),
    ):
        text = render_text(doc, 80)
        assert max(map(len, text.splitlines())) <= 80
        # git's short hash, "+" where the tree had uncommitted changes
        assert "0123456+" in text and "fedcba9 " in text and "0123456789" not in text
    assert "git_commit" in doc.data["results"][0]  # the JSON keeps the full hash
