"""Do two versions of lightspeed write the same documents? Write, then compare.

    # with each version on PYTHONPATH in turn (a git worktree of the old one):
    python benchmarks/compare_documents.py capture RESULTS_DIR   # once, by the old version
    python benchmarks/compare_documents.py write OUT_DIR [--traces DIR] [--profiles DIR]
                                                 [--results RESULTS_DIR]
    python benchmarks/compare_documents.py compare OLD_DIR NEW_DIR

`write` analyses every `*.json.gz` trace of `--traces` (default ../shared/traces) and
re-analyses every saved profile of `--profiles` (their measured facts are the same
for both versions), writing each document to OUT_DIR. `capture` measures once what a
document is drawn from (profiles of tiny suite workloads, a bench run and a tune run,
pickled: their facts are frozen dataclasses of `lightspeed.facts`); `write --results`
draws each of them, and the profiles' predictions on catalog GPUs, both as terminal
text (120 columns) and as JSON, so the terminal output is compared byte for byte too.
`compare` lists, per document,
the JSON paths that differ once the renames between schema versions are applied to
the old one (bound and finding names of schema 1; renamed keys show as a removed and
an added key). Numbers compare exactly, to within 1e-12 relative.
"""

from __future__ import annotations

import argparse
import dataclasses
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


_TINY = ("mlp-tiny", "resnet18-tiny", "gpt2-tiny")
# Predictions that measure nothing on this machine, so both versions predict from the
# same facts (a batch size, a link or checkpointing's own cost are timed here).
_PREDICTIONS = (("--hardware", "h100-sxm"), ("--hardware", "h100-sxm", "--fuse", "4"))


def _read_only(mapping: dict[Any, Any]) -> Any:
    """A read-only view of `mapping`, as the facts keep theirs (pickles name this)."""
    import types

    return types.MappingProxyType(mapping)


def capture(results: Path) -> None:
    """Measure what the documents are drawn from, once, with the version at hand."""
    import copyreg
    import pickle
    import types

    import lightspeed
    from lightspeed.suite import get

    # Facts keep their mappings read-only; a pickle keeps them as such.
    copyreg.pickle(types.MappingProxyType, lambda m: (_read_only, (dict(m),)))

    try:
        from lightspeed.workflows.bench import bench
        from lightspeed.workflows.tune import tune
    except ImportError:  # before the workflows had a folder
        from lightspeed.workflows.bench import bench  # type: ignore
        from lightspeed.workflows.tune import tune  # type: ignore

    results.mkdir(parents=True, exist_ok=True)
    hardware = lightspeed.resolve_hardware("local", lightspeed.Device.CPU)
    for name in _TINY:
        if not (results / f"profile-{name}.json").exists():
            lightspeed.save_profile(lightspeed.profile(name), results / f"profile-{name}.json")
    run = bench([get("mlp-tiny")], hardware, rounds=2, budget_s=0.3)
    (results / "bench.pickle").write_bytes(pickle.dumps(run))
    tuning = tune(get("mlp-tiny"), only=["amp", "checkpoint"], budget_s=0.3)
    (results / "tune.pickle").write_bytes(pickle.dumps(tuning))


def _terminal(doc: Any) -> str:
    from lightspeed.report.render_terminal import render_text

    return render_text(doc, width=120)


def _cli(*args: str) -> tuple[str, str]:
    """`lightspeed ARGS…` run here: (terminal text, JSON text)."""
    import contextlib
    import io
    import os
    import tempfile

    from lightspeed.cli import main

    # One run gives both: with a path, --json writes the document and the terminal report
    # is drawn as well. A failure reads as its exit status and error line, which both
    # versions must then say alike.
    out, err = io.StringIO(), io.StringIO()
    os.environ["COLUMNS"] = "120"
    with tempfile.TemporaryDirectory() as tmp:
        written = Path(tmp) / "doc.json"
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main([*args, "--json", str(written)])
            except SystemExit as exit_:
                if exit_.code:
                    failed = f"exit {exit_.code}: {err.getvalue().strip().splitlines()[-1:]}\n"
                    return failed, json.dumps({"failed": failed})
        return out.getvalue(), written.read_text()


def _current(tuning: Any) -> Any:
    """`tuning` (an unpickled `Tuning`) as the version at hand keeps it. A tuning pickled
    before candidates had a kind (`Candidate.kind`) and a `Verdict` (a plain string then)
    gets both: the kind read from the candidate's name, the only record of it then."""
    try:
        from lightspeed.facts.tuning import Verdict, kind_named
    except ImportError:  # a version before both reads its own pickles as they are
        return tuning

    def current(c: Any) -> Any:
        if "kind" in vars(c):
            return c
        return dataclasses.replace(c, kind=kind_named(c.name), verdict=Verdict(c.verdict))

    return dataclasses.replace(
        tuning,
        candidates=tuple(current(c) for c in tuning.candidates),
        chosen=None if tuning.chosen is None else current(tuning.chosen),
    )


def _results(out: Path, results: Path) -> None:
    """Every document drawn from `results` (see `capture`)."""
    import pickle

    import lightspeed
    from lightspeed.report import render_json
    from lightspeed.report.bench_report import bench_document
    from lightspeed.report.profile_report import profile_document
    from lightspeed.report.tune_report import tune_document

    for path in sorted(results.glob("profile-*.json")):
        analysis = lightspeed.analyse(lightspeed.load_profile(path))
        doc = profile_document(analysis)
        (out / f"{path.stem}.txt").write_text(_terminal(doc))
        for i, args in enumerate(_PREDICTIONS):
            text, data = _cli("predict", str(path), *args)
            (out / f"predict{i}-{path.stem}.txt").write_text(text)
            (out / f"predict{i}-{path.stem}.json").write_text(data)

    def tuned(tuning: Any) -> Any:
        return tune_document(_current(tuning))

    for name, draw in (("bench", bench_document), ("tune", tuned)):
        pickled = results / f"{name}.pickle"
        if pickled.exists():
            doc = draw(pickle.loads(pickled.read_bytes()))
            (out / f"{name}.txt").write_text(_terminal(doc))
            (out / f"{name}.json").write_text(json.dumps(render_json.render(doc), indent=2))


def write(out: Path, traces: Path, profiles: Path | None, results: Path | None = None) -> None:
    import lightspeed

    out.mkdir(parents=True, exist_ok=True)
    document_of = _trace_writer()
    for path in sorted(traces.glob("*.json.gz")):
        name = f"trace-{path.name.removesuffix('.json.gz')}.json"
        (out / name).write_text(json.dumps(document_of(path), indent=2, default=str))
        if results is not None:
            text, _ = _cli("trace", str(path))
            (out / f"{name.removesuffix('.json')}.txt").write_text(text)
    for path in sorted(profiles.glob("*.json")) if profiles else []:
        lightspeed.save_profile(lightspeed.load_profile(path), out / f"profile-{path.name}")
    if results is not None:
        _results(out, results)


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
    for path in sorted(old.glob("*.txt")):
        other = new / path.name
        same = other.exists() and other.read_bytes() == path.read_bytes()
        print(f"{path.name}: {'byte-equal' if same else 'DIFFERS'}")
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
    w.add_argument("--results", type=Path, default=None)
    m = sub.add_parser("capture")
    m.add_argument("results", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args.out, args.traces, args.profiles, args.results)
    elif args.command == "capture":
        capture(args.results)
    else:
        compare(args.old, args.new)


if __name__ == "__main__":
    main()
