"""The results store: every bench run, kept in SQLite, to list and compare over time.

A store is one SQLite file (stdlib `sqlite3`) in write-ahead-log mode, so that several
bench processes can append at once and a reader never blocks them. A run is written in
one transaction: a process killed mid-run leaves every run committed before it whole
and no part of its own. The file says what it is in its `meta` table
(`store` = `lightspeed-history`, `schema_version`); a file that is not a store, or one
of a newer schema, is refused before anything is written to it. An older schema is
brought up to date by `MIGRATIONS`, each in its own transaction.

Each run keeps the bench JSON document it was made from (`runs.document`), so a later
lightspeed can read what an earlier one measured; `results` holds the figures a
comparison reads, one row per workload.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lightspeed.errors import LightspeedError

STORE_KIND = "lightspeed-history"
SCHEMA_VERSION = 1
STORE_FILE = "history.sqlite"
# Seconds a writer waits for another's transaction before giving up.
BUSY_TIMEOUT_S = 30.0

_SCHEMA_1 = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    lightspeed_version TEXT,
    torch_version TEXT,
    machine TEXT,
    hardware_id TEXT,
    threads INTEGER,
    git_commit TEXT,
    size TEXT,
    rounds INTEGER,
    document TEXT NOT NULL
);
CREATE TABLE results (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    workload TEXT NOT NULL,
    step_s REAL,
    round_spread REAL,
    samples_per_s REAL,
    efficiency REAL,
    mfu REAL,
    peak_bytes INTEGER,
    failure TEXT,
    PRIMARY KEY (run_id, workload)
);
"""

# MIGRATIONS[v] brings a store of schema v to v + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}


class StoreError(LightspeedError):
    """A results store that cannot be used as one (not a store, a newer schema)."""


def default_store() -> Path:
    """Where bench runs are kept: $LIGHTSPEED_DATA_DIR, else the XDG data directory."""
    override = os.environ.get("LIGHTSPEED_DATA_DIR")
    if override:
        return Path(override) / STORE_FILE
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "lightspeed" / STORE_FILE


@contextlib.contextmanager
def opened(path: Path, *, create: bool = True) -> Iterator[sqlite3.Connection]:
    """A connection to the store at `path`, checked, migrated, or created when missing
    (with `create`); closed on exit."""
    if not path.exists():
        if not create:
            raise StoreError(f"{path}: no results store there; run `lightspeed bench` first.")
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        _check(path)
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        _set_wal(connection)
        connection.execute("PRAGMA foreign_keys=ON")
        _create_or_migrate(connection)
        yield connection
    finally:
        connection.close()


def _set_wal(connection: sqlite3.Connection) -> None:
    """Put the store in WAL mode. Two processes opening a new store at once both ask for
    it, and SQLite answers the second "database is locked" at once, without waiting as
    it does for writes: wait and ask again, for up to the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def check(path: Path) -> None:
    """Refuse, touching nothing, a file at `path` that is not a store or is one of a
    newer schema; a missing or empty file is fine (it becomes a store)."""
    if path.exists():
        _check(path)


def _check(path: Path) -> None:
    """Refuse a file that is not a store, or is one of a newer schema, touching nothing."""
    what = f"{path} is not a lightspeed results store"
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        ) as reading:
            tables = {r[0] for r in reading.execute("SELECT name FROM sqlite_master")}
            if not tables:
                return  # an empty file: becomes a store
            if "meta" not in tables:
                raise StoreError(f"{what}; give another --store PATH.")
            meta = dict(reading.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{what} ({exc}); give another --store PATH.") from exc
    if meta.get("store") != STORE_KIND:
        raise StoreError(f"{what}; give another --store PATH.")
    version = int(meta.get("schema_version", 0))
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} holds results of schema {version}, newer than this lightspeed reads"
            f" ({SCHEMA_VERSION}); upgrade lightspeed or give another --store PATH."
        )


def _create_or_migrate(connection: sqlite3.Connection) -> None:
    with _transaction(connection):
        tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master")}
        if "meta" not in tables:
            connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            # One statement at a time: executescript would commit the transaction first.
            for statement in filter(str.strip, _SCHEMA_1.split(";")):
                connection.execute(statement)
            _set_meta(connection, store=STORE_KIND, schema_version=str(1))
    version = int(_meta(connection)["schema_version"])
    while version < SCHEMA_VERSION:
        with _transaction(connection):
            MIGRATIONS[version](connection)
            version += 1
            _set_meta(connection, schema_version=str(version))


def _meta(connection: sqlite3.Connection) -> dict[str, str]:
    return dict(connection.execute("SELECT key, value FROM meta").fetchall())


def _set_meta(connection: sqlite3.Connection, **values: str) -> None:
    connection.executemany(
        "INSERT INTO meta (key, value) VALUES (?, ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        values.items(),
    )


@contextlib.contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
    # BEGIN IMMEDIATE takes the write lock at once, so two writers queue (busy_timeout)
    # rather than fail half-way.
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def record(path: Path, document: Mapping[str, Any]) -> int:
    """Append the bench JSON `document` to the store at `path`; its run id."""
    env = document.get("environment") or {}
    hardware = document.get("hardware") or {}
    with opened(path) as connection, _transaction(connection):
        cursor = connection.execute(
            "INSERT INTO runs (created_at, lightspeed_version, torch_version, machine,"
            " hardware_id, threads, git_commit, size, rounds, document)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                document.get("created_at"),
                document.get("lightspeed_version"),
                env.get("torch_version"),
                hardware.get("name"),
                hardware.get("id"),
                document.get("threads"),
                env.get("git_commit"),
                document.get("size"),
                document.get("rounds"),
                json.dumps(document),
            ),
        )
        run_id = cursor.lastrowid
        assert run_id is not None
        connection.executemany(
            "INSERT INTO results (run_id, workload, step_s, round_spread, samples_per_s,"
            " efficiency, mfu, peak_bytes, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [_result_row(run_id, r) for r in document.get("results", [])],
        )
    return run_id


def _result_row(run_id: int, result: Mapping[str, Any]) -> tuple[Any, ...]:
    timing = result.get("timing") or {}
    totals = result.get("totals") or {}
    memory = result.get("memory") or {}
    return (
        run_id,
        result["workload"]["name"],
        result.get("step_s"),
        result.get("round_spread"),
        timing.get("samples_per_s"),
        totals.get("efficiency"),
        totals.get("mfu"),
        memory.get("peak_bytes"),
        result.get("failure"),
    )


def runs(path: Path) -> list[dict[str, Any]]:
    """Every run in the store, oldest first, without its document: id, created_at,
    versions, machine, threads, git commit, size, rounds, workloads. None yet where
    there is no store."""
    return _rows(
        path,
        "SELECT r.id, r.created_at, r.lightspeed_version, r.torch_version, r.machine,"
        " r.hardware_id, r.threads, r.git_commit, r.size, r.rounds,"
        " COUNT(x.workload) AS workloads"
        " FROM runs r LEFT JOIN results x ON x.run_id = r.id GROUP BY r.id ORDER BY r.id",
    )


def workload_history(path: Path, workload: str) -> list[dict[str, Any]]:
    """One workload's results across runs, oldest first, with each run's id, date,
    machine, threads and commit."""
    return _rows(
        path,
        "SELECT r.id, r.created_at, r.machine, r.threads, r.git_commit, x.*"
        " FROM results x JOIN runs r ON r.id = x.run_id WHERE x.workload = ?"
        " ORDER BY r.id",
        workload,
    )


def _rows(path: Path, query: str, *parameters: Any) -> list[dict[str, Any]]:
    """The rows `query` selects from the store at `path`, as dicts; none without a store."""
    if not path.exists():
        return []
    with opened(path, create=False) as connection:
        connection.row_factory = sqlite3.Row
        return [dict(row) for row in connection.execute(query, parameters).fetchall()]


def run_document(path: Path, run_id: int | None = None) -> dict[str, Any]:
    """The bench document of run `run_id` (None: the last run), with its `run_id`."""
    with opened(path, create=False) as connection:
        query = "SELECT id, document FROM runs"
        row = (
            connection.execute(query + " WHERE id = ?", (run_id,)).fetchone()
            if run_id is not None
            else connection.execute(query + " ORDER BY id DESC LIMIT 1").fetchone()
        )
    if row is None:
        which = f"run {run_id}" if run_id is not None else "any run"
        raise StoreError(f"{path} holds no {which}; `lightspeed history` lists the runs.")
    document: dict[str, Any] = json.loads(row[1])
    document["run_id"] = row[0]
    return document


def last_run_ids(path: Path, count: int) -> list[int]:
    """The ids of the last `count` runs, oldest first."""
    with opened(path, create=False) as connection:
        rows = connection.execute("SELECT id FROM runs ORDER BY id DESC LIMIT ?", (count,))
        return sorted(r[0] for r in rows)
