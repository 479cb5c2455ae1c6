"""NeuSight's published GPU runs read as profiles (`benchmarks/neusight.py`) and one
predicted on another GPU (`benchmarks/published_gpus.py`), on an excerpt of the data in
tests/data/neusight: BERT-large inference, sequence 512, batch 8, on a T4 and a V100."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

import lightspeed
from lightspeed.hardware import catalog_hardware
from lightspeed.predict.hardware import SUSTAINED

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import neusight
import published_gpus

DATA = Path(__file__).parent / "data" / "neusight"
KEY = neusight.RunKey("bert_large", "inf", 512, 8)


@pytest.fixture(scope="module")
def on_t4() -> neusight.Mapped:
    return neusight.profile_of(neusight.read_run(DATA, "Tesla_T4", KEY), catalog_hardware("t4"))


def test_the_reader_maps_each_node_to_lightspeeds_ops(on_t4: neusight.Mapped) -> None:
    profile = on_t4.profile
    assert profile.step_time_s == pytest.approx(694.4645385742188e-3)  # the JSON's e2e
    # The layer's ops repeat 24 times, each copy under its own module path.
    query = [op for op in profile.ops if op.name == "aten::addmm" and "self.query" in op.module]
    assert [op.module for op in query] == [
        f"bert.encoder.layer.{i}.attention.self.query" for i in range(24)
    ]
    # x [8·512, 1024] @ W [1024, 1024] + b: 2·4096·1024·1024 FLOPs; 4 bytes each of x,
    # W, b and the output: 4·(4096·1024 + 1024·1024 + 1024 + 4096·1024) bytes.
    assert {op.flops for op in query} == {2 * 4096 * 1024 * 1024}
    assert {op.bytes for op in query} == {4 * (4096 * 1024 + 1024 * 1024 + 1024 + 4096 * 1024)}
    # The node's measured time is its one kernel's (views beside it share none).
    assert query[0].time_s == pytest.approx(3.1667456150054935e-3)
    # The op-by-op run: every node's time, the layer's 24 times over.
    with (DATA / "label" / "Tesla_T4" / f"{KEY.stem}.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    in_layer = [re.search(r"'bert\.encoder\.layer\.0'", r["meta"]) is not None for r in rows]
    total = sum(float(r["latency"]) * (24 if x else 1) for r, x in zip(rows, in_layer, strict=True))
    assert on_t4.profiled_ms == pytest.approx(total)
    assert profile.profiled_step_s == pytest.approx(total * 1e-3)
    timed = sum(op.time_s or 0.0 for op in profile.ops)
    assert profile.unattributed_s == pytest.approx(on_t4.unmapped_ms * 1e-3)
    assert timed + on_t4.unmapped_ms * 1e-3 == pytest.approx(total * 1e-3)
    # What runs no kernel: Python on sizes and flags, and dropout in eval mode.
    assert on_t4.unmapped_nodes == (
        "call_function <built-in function add>",
        "call_function <built-in function eq>",
        "call_function <built-in function getattr>",
        "call_function <built-in function getitem>",
        "call_method dim",
        "call_method size",
        "call_module dropout",
    )
    assert on_t4.residual == pytest.approx(694.4645385742188 / total - 1)


def test_one_pair_predicted_from_the_t4_to_the_v100(on_t4: neusight.Mapped) -> None:
    v100 = catalog_hardware("v100-pcie-32gb")
    predicted = lightspeed.predict(on_t4.profile, hardware=v100)
    measured_ms = neusight.read_run(DATA, "Tesla_V100-PCIE-32GB", KEY).e2e_ms
    peak_ratio_ms = 694.4645385742188 * 8.1 / 14
    assert predicted.step_time_s is not None
    # Pinned: the frozen rates of predict/hardware.py on this profile.
    assert predicted.step_time_s * 1e3 == pytest.approx(258.1235, rel=1e-4)
    error = abs(predicted.step_time_s * 1e3 / measured_ms - 1)
    assert error < 0.05 < abs(peak_ratio_ms / measured_ms - 1)


def test_the_benchmark_writes_every_pair_and_product(tmp_path: Path) -> None:
    out = tmp_path / "pairs.json"
    published_gpus.main(["--data", str(DATA), "--json", str(out), "--held-out", ""])
    doc = json.loads(out.read_text())
    pairs = {(p["source_gpu"], p["target_gpu"]): p for p in doc["pairs"]}
    assert set(pairs) == {
        ("Tesla_T4", "Tesla_V100-PCIE-32GB"),
        ("Tesla_V100-PCIE-32GB", "Tesla_T4"),
    }
    row = pairs[("Tesla_T4", "Tesla_V100-PCIE-32GB")]
    assert (row["model"], row["mode"], row["seq"], row["batch"]) == ("bert_large", "inf", 512, 8)
    assert row["measured_ms"] == pytest.approx(257.4217224121094)
    # Four products on both GPUs, each carried both ways.
    assert len(doc["gemm_pairs"]) == 8
    assert set(doc["gemm_pairs"][0]) >= {
        "op",
        "B",
        "M",
        "N",
        "K",
        "source_gpu",
        "target_gpu",
        "measured_ms",
        "predicted_ms",
    }


def test_a_held_out_gpu_is_only_predicted_with_the_frozen_rates(tmp_path: Path) -> None:
    # The excerpt with its T4 renamed to a GPU the shared data holds out.
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    (data / "label" / "Tesla_T4").rename(data / "label" / "NVIDIA_L4")
    products = data / "gemm_fp32.csv"
    products.write_text(products.read_text().replace("Tesla T4", "NVIDIA L4"))
    out = tmp_path / "pairs.json"
    published_gpus.main(["--data", str(data), "--json", str(out)])
    doc = json.loads(out.read_text())
    assert {(p["source_gpu"], p["target_gpu"]) for p in doc["pairs"]} == {
        ("Tesla_V100-PCIE-32GB", "NVIDIA_L4")
    }
    assert {(p["source_gpu"], p["target_gpu"]) for p in doc["gemm_pairs"]} == {
        ("Tesla_V100-PCIE-32GB", "NVIDIA_L4")
    }
    assert doc["rates"]["NVIDIA_L4"] == dataclasses.asdict(SUSTAINED)
    assert list(doc["summary"]) == ["held out, inf"]
