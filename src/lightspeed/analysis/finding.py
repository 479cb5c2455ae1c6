"""`Finding`: one thing a report tells the user to look at, with its evidence."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True, kw_only=True)
class Finding:
    """One observation: a `kind` (stable id), a one-line `message`, and its `evidence`
    (numbers in the units their keys name; `max_speedup` where a fix is bounded)."""

    kind: str
    message: str
    evidence: Mapping[str, float | int | str]
