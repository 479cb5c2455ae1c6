"""The frame of every JSON document lightspeed writes: a `schema_version`, what the
document is (`document`), strict JSON (no NaN or infinity), atomic writes. Imports
nothing heavy, so reading a trace does not load the hardware catalog or the timer."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lightspeed.rules import Finding

# 2: timing `median_s` and `replicates` (were `step_time_s` and `n`); one vocabulary of
# bounds (`compute`, `memory`, `overhead`, …) and finding kinds; trace matmuls without
# `sol_time_s` (it was kernel time), with `unaligned_by_precision`.
SCHEMA_VERSION = 2
# Profile documents of these versions hold the same facts and still load.
READABLE_PROFILE_VERSIONS = (1, 2)


def document(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` stamped with the schema version and what the document is."""
    return {"schema_version": SCHEMA_VERSION, "document": kind, **body}


def dumps(doc: dict[str, Any]) -> str:
    """Strict JSON text: non-finite floats (an infinite intensity) become null."""
    return json.dumps(_finite(doc), indent=2, allow_nan=False)


def write(path: Path, doc: dict[str, Any]) -> Path:
    """Write `doc` to `path` atomically (a failure never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(doc) + "\n", "utf-8")
    tmp.replace(path)
    return path


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding's JSON object: kind, message, evidence."""
    return {"kind": f.kind.value, "message": f.message, "evidence": dict(f.evidence)}
