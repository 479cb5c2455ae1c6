"""Do two versions of lightspeed write the same documents? Write, then compare.

    # with each version on PYTHONPATH in turn (a git worktree of the old one):
    python benchmarks/compare_documents.py write OUT_DIR [--traces DIR] [--profiles DIR]
    python benchmarks/compare_documents.py compare OLD_DIR NEW_DIR

`write` analyses every `*.json.gz` trace of `--traces` (default ../shared/traces) and
re-analyses every saved profile of `--profiles` (their measured facts are the same
for both versions), writing each document to OUT_DIR. `compare` lists, per document,
the JSON paths that differ once the renames between schema versions are applied to
the old one (bound and finding names of schema 1; renamed keys show as a removed and
an added key). Numbers compare exactly, to within 1e-12 relative.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Schema 1 → 2: one vocabulary of bounds and finding kinds.
_BOUNDS = {"gpu-compute": "compute", "cpu-compute": "compute", "cpu-launch-overhead": "overhead"}
_KINDS = {
    "gpu-compute": "device-busy",
    "tensor-core-ineligible": "tensor-core-shapes",
    "overhead-bound-ops": "host-overhead",
    "unattributed-time": "host-overhead",
}


def _trace_writer() -> Any:
    """A function from a trace path to its JSON document, in the version at hand."""
    try:
        from lightspeed import trace
        from lightspeed.report import render_json
        from lightspeed.report.trace_report import trace_document

        return lambda path: render_json.render(trace_document(trace.analyse([path])))
    except ImportError:  # schema 1: analyses in analysis/, reports written twice
        from lightspeed.analysis.trace_summary import analyse_traces  # type: ignore
        from lightspeed.report.trace_json import trace_doc  # type: ignore

        from lightspeed.trace.load import load_traces

        return lambda path: trace_doc(analyse_traces(load_traces([path])))


def write(out: Path, traces: Path, profiles: Path | None) -> None:
    import lightspeed

    out.mkdir(parents=True, exist_ok=True)
    document_of = _trace_writer()
    for path in sorted(traces.glob("*.json.gz")):
        name = f"trace-{path.name.removesuffix('.json.gz')}.json"
        (out / name).write_text(json.dumps(document_of(path), indent=2, default=str))
    for path in sorted(profiles.glob("*.json")) if profiles else []:
        lightspeed.save_profile(lightspeed.load_profile(path), out / f"profile-{path.name}")


def _renamed(value: Any) -> Any:
    """A schema-1 document in schema 2's names."""
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        if key == "bound" and isinstance(v, str):
            v = _BOUNDS.get(v, v)
        if key == "kind" and v == "cpu-launch-overhead":
            v = "device-idle" if "device idles" in value.get("message", "") else "host-overhead"
        elif key == "kind" and isinstance(v, str):
            v = _KINDS.get(v, v)
        out[key] = _renamed(v)
    return out


def diff(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Every path where `a` and `b` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a:
                yield f"+ {path}.{key}"
            elif key not in b:
                yield f"- {path}.{key}"
            else:
                yield from diff(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"~ {path}: {len(a)} → {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from diff(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        if not math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15):
            yield f"~ {path}: {a} → {b}"
    elif a != b:
        yield f"~ {path}: {str(a)[:80]!r} → {str(b)[:80]!r}"


def compare(old: Path, new: Path) -> None:
    for path in sorted(old.glob("*.json")):
        other = new / path.name
        if not other.exists():
            print(f"{path.name}: missing in {new}")
            continue
        before = _renamed(json.loads(path.read_text()))
        found = list(diff(before, json.loads(other.read_text())))
        counts: dict[str, int] = {}
        for line in found:
            key = re.sub(r"\[\d+\]", "[]", line.split(":")[0])
            counts[key] = counts.get(key, 0) + 1
        print(f"{path.name}: {len(found)} differences")
        for key, n in counts.items():
            print(f"  {n:6d}  {key}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("out", type=Path)
    w.add_argument("--traces", type=Path, default=Path("../shared/traces"))
    w.add_argument("--profiles", type=Path, default=None)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.traces, args.profiles)
    else:
        compare(args.old, args.new)


if __name__ == "__main__":
    main()
