"""`lightspeed trace` on trace folders laid out as torchtitan and torchtune write them:
one `iteration_N/` folder a profiling cycle, one trace a rank inside it."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

from trace_paths import TRACES

RANKS = [TRACES / f"hta-recsys-128ranks-sampled-rank{r}.json.gz" for r in (0, 1)]


def _torchtitan(root: Path, iterations: tuple[int, ...]) -> Path:
    """`{dump_folder}/{save_traces_folder}/iteration_N/rank{R}_trace.json` (plain JSON)."""
    traces = root / "outputs" / "profile_traces"
    for n in iterations:
        folder = traces / f"iteration_{n}"
        folder.mkdir(parents=True)
        for rank, path in enumerate(RANKS):
            (folder / f"rank{rank}_trace.json").write_bytes(gzip.decompress(path.read_bytes()))
    return traces


def _torchtune(root: Path) -> Path:
    """`{output_dir}/iteration_N/rank{R}.{ms}.pt.trace.json.gz` (its TensorBoard handler),
    beside the key averages it writes as text."""
    folder = root / "profiling_outputs" / "iteration_12"
    folder.mkdir(parents=True)
    for rank, path in enumerate(RANKS):
        shutil.copy(path, folder / f"rank{rank}.1795784000123.pt.trace.json.gz")
        (folder / f"rank{rank}_key_averages.txt").write_text("Name  Self CPU %\n")
    return folder


def test_a_torchtitan_cycle_is_read_as_its_ranks(run_cli: Any, tmp_path: Path) -> None:
    cycle = _torchtitan(tmp_path, (10,)) / "iteration_10"
    out = tmp_path / "t.json"
    code, _, err = run_cli(
        "trace", str(cycle), "--json", str(out), "--html", str(tmp_path / "t.html")
    )
    assert code == 0, err
    assert [r["rank"] for r in json.loads(out.read_text())["ranks"]] == [0, 1]
    assert (tmp_path / "t.html").stat().st_size > 0


def test_a_torchtune_cycle_is_read_as_its_ranks(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    code, _, err = run_cli("trace", str(_torchtune(tmp_path)), "--json", str(out))
    assert code == 0, err
    assert [r["rank"] for r in json.loads(out.read_text())["ranks"]] == [0, 1]


def test_the_folder_of_cycles_names_the_latest_to_give(run_cli: Any, tmp_path: Path) -> None:
    traces = _torchtitan(tmp_path, (5, 10, 100))
    code, _, err = run_cli("trace", str(traces))
    assert code == 2 and err.count("\n") == 1
    assert "iteration_5, iteration_10, iteration_100" in err
    assert f"lightspeed trace {traces / 'iteration_100'}" in err
