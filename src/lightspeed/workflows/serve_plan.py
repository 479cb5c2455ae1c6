"""`lightspeed serve-plan`'s input: sessions (a model, its latency profile, a request
rate and an SLO) read from a SESSIONS.toml, and the targets that run them for real."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lightspeed.errors import ConfigError
from lightspeed.facts.serving import LatencyProfile
from lightspeed.predict.serving import Session
from lightspeed.report.html import read_result
from lightspeed.report.serving_report import DOCUMENT, latency_from_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_sessions(path: Path) -> list[Session]:
    """The sessions of a SESSIONS.toml: `[[session]]` tables, each with `name`,
    `latency` (a `serve-profile --json` result, relative to the file; its prediction
    where it has one), `rate` (requests a second) and `slo_ms`; refused in one line
    where anything is wrong."""
    where = str(path)
    tables = _tables(path)
    sessions = []
    for i, table in enumerate(tables, 1):
        missing = [k for k in ("name", "latency", "rate", "slo_ms") if k not in table]
        if missing:
            raise ConfigError(f"{where}: session {i} has no {', '.join(missing)}.")
        latency = read_latency(
            path.parent / str(table["latency"]), f"{where}: session {i}'s", predicted=True
        )
        try:
            rate, slo = float(table["rate"]), float(table["slo_ms"]) / 1e3
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: session {i}'s rate and slo_ms must be numbers.") from None
        sessions.append(
            Session(
                name=str(table["name"]),
                latency=latency,
                rate_per_s=rate,
                slo_s=slo,
            )
        )
    return sessions


def read_targets(path: Path) -> dict[str, str]:
    """The targets of a SESSIONS.toml's sessions that name one (`target = "…"`: a suite
    name, `file.py:NAME` relative to the file, or `hf:…`), by session name; sessions
    without one are left out. Refused in one line where a target is not a string."""
    where = str(path)
    targets = {}
    for i, table in enumerate(_tables(path), 1):
        if "target" not in table:
            continue
        target = table["target"]
        if not isinstance(target, str) or not target.strip():
            raise ConfigError(
                f"{where}: session {i}'s target must be a suite name or file.py:NAME, in quotes."
            )
        name = str(table.get("name", i))
        if name in targets:
            raise ConfigError(f"{where}: two sessions are named {name!r}; name each once.")
        targets[name] = _relative_to(path.parent, target.strip())
    return targets


def _relative_to(folder: Path, target: str) -> str:
    """`target` with a file it names taken relative to `folder`."""
    if target.startswith("hf:") or not (":" in target or target.endswith(".py")):
        return target
    file, sep, attr = target.rpartition(":") if ":" in target else (target, "", "")
    return f"{folder / file}{sep}{attr}"


def _tables(path: Path) -> list[dict[str, Any]]:
    """The `[[session]]` tables of the SESSIONS.toml at `path`."""
    where = str(path)
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file; give a SESSIONS.toml.") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{where}: not readable as TOML ({exc}).") from None
    tables = data.get("session")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{where}: no [[session]] tables; each names a model, rate and SLO.")
    return tables


def read_latency(
    path: Path, whose: str = "--profile", *, predicted: bool = False
) -> LatencyProfile:
    """The latency profile a `lightspeed serve-profile --json` result at `path` holds:
    the one measured, or with `predicted` the one predicted on other hardware or in
    another precision where the result has one (a plan for that hardware); refused in
    one line (naming `whose` it is) for any other file."""
    result = read_result(path)
    if result["document"] != DOCUMENT:
        raise ConfigError(
            f"{whose} latency {str(path)!r} is a {result['document']} result; give a"
            " `lightspeed serve-profile --json` one."
        )
    forecast = result.get("predicted") if predicted else None
    return latency_from_data(result["latency"] if forecast is None else forecast["latency"])
