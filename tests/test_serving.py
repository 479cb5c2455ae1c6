"""Inference latency by batch size (`lightspeed serve-profile`): the forward alone, each
call timed, its FLOPs counted and placed on the roofline."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from factories import FAKE_CPU, RunCli
from lightspeed.errors import ConfigError
from lightspeed.facts.serving import BatchLatency
from lightspeed.report.serving_report import latency_data, latency_from_data
from lightspeed.workflows.latency import latency_by_batch, parse_batch_sizes
from lightspeed.workload import Workload
from lightspeed.workload.inference import inputs_of


def test_a_training_batchs_inputs_leave_its_labels_out() -> None:
    x, y = torch.zeros(2, 3), torch.zeros(2)
    assert inputs_of(x)[0][0] is x
    assert inputs_of((x, y)) == ((x,), {})
    assert inputs_of({"input_ids": x, "labels": y}) == ((), {"input_ids": x})
    Pair = namedtuple("Pair", "a b")  # a namedtuple is one input, not (inputs, targets)
    pair = Pair(x, y)
    assert inputs_of(pair)[0][0] is pair


def test_the_tail_is_a_call_that_happened() -> None:
    b = BatchLatency(
        batch_size=4, latencies_s=tuple(float(t) for t in range(1, 101)), flops=8, bytes=0
    )
    # nearest rank: the 99th of 100 calls; below 100 calls the slowest
    assert b.p99_s == 99.0
    assert BatchLatency(batch_size=1, latencies_s=(3.0, 1.0, 2.0), flops=1, bytes=0).p99_s == 3.0
    assert b.median_s == 50.5 and b.throughput_per_s == 4 / 50.5


def linear_workload(calls: list[int] | None = None) -> Workload:
    def forward(model: torch.nn.Module, batch: object) -> object:
        if calls is not None:
            calls.append(1)
        return model(batch[0])  # type: ignore[index]

    return Workload(
        name="linear",
        model=lambda: torch.nn.Linear(64, 32),
        batch=lambda n: (torch.randn(n, 64), torch.zeros(n)),
        loss=lambda m, b: m(b[0]).sum(),
        batch_size=1,
        forward=None if calls is None else forward,
    )


def test_each_batch_is_timed_call_by_call_and_counted_exactly() -> None:
    found = latency_by_batch(linear_workload(), [1, 4], hardware=FAKE_CPU, budget_s=0.01)
    one, four = found.batches
    # addmm: 2 × batch × 64 × 32 FLOPs, plus the bias: 4 × 2 × 64 × 32 = 16384
    assert four.flops == 4 * one.flops == 4 * 2 * 64 * 32
    assert len(one.latencies_s) >= 20 and one.p99_s >= one.median_s > 0
    assert one.sol_time_s is not None and one.sol_time_s > 0
    assert latency_from_data(json.loads(json.dumps(latency_data(found)))) == found


def test_a_workloads_own_forward_is_what_is_timed() -> None:
    calls: list[int] = []
    latency_by_batch(linear_workload(calls), [2], hardware=FAKE_CPU, budget_s=0.01)
    assert len(calls) >= 20 + 3 + 1  # the timed calls, the warm-up and the counted one


def test_batch_sizes_are_whole_numbers_of_at_least_one() -> None:
    assert parse_batch_sizes("1, 2,4,2") == (1, 2, 4)
    for bad in ("1,x", "0", ""):
        with pytest.raises(ConfigError, match="--batch-sizes"):
            parse_batch_sizes(bad)


def test_cli_writes_the_latency_table_and_its_json(
    run_cli: RunCli, tmp_path: Path, calibrated_cpu: object
) -> None:
    out = tmp_path / "latency.json"
    code, printed, err = run_cli(
        "serve-profile",
        "mlp-tiny",
        "--hardware",
        "local",
        "--batch-sizes",
        "1,2",
        "--budget",
        "0.05",
        "--json",
        str(out),
        "--html",
        str(tmp_path / "latency.html"),
    )
    assert code == 0, err
    assert "Latency by batch size" in printed and "samples/s" in printed
    data = json.loads(out.read_text())
    assert [b["batch_size"] for b in data["latency"]["batches"]] == [1, 2]
    page = (tmp_path / "latency.html").read_text()
    # the latency and throughput charts, and the table's two rows
    assert 'data-chart="latency"' in page and 'data-chart="throughput"' in page
    assert "Latency by batch size" in page and page.count("<tr") >= 3
    code, _, err = run_cli("serve-profile", "mlp-tiny", "--batch-sizes", "0")
    assert code == 2 and "--batch-sizes" in err


SESSIONS = Path(__file__).parent / "data" / "serving" / "sessions.toml"


def test_serve_plan_packs_the_sessions_and_simulates_them(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    code, printed, err = run_cli(
        "serve-plan",
        str(SESSIONS),
        "--simulate",
        "10",
        "--json",
        str(out),
        "--html",
        str(tmp_path / "plan.html"),
    )
    assert code == 0, err
    data = json.loads(out.read_text())
    assert len(data["gpus"]) < data["baseline_gpus"] == 12  # ⌈900 / (0.9 / 10.2 ms)⌉ + 1
    assert all(o["within_slo"] >= 0.99 * o["requests"] > 0 for o in data["outcomes"])
    assert "Serving plan" in printed
    page = (tmp_path / "plan.html").read_text()
    table = page.split("<table", 1)[1]  # a row for each session's share of a GPU
    assert 'data-chart="within-slo"' in page and "encoder" in table and "small" in table


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no [[session]]"),
        ('[[session]]\nname = "a"\nlatency = "encoder.json"\nrate = 1\n', "no slo_ms"),
        ('[[session]]\nname = "a"\nlatency = "nothere.json"\nrate = 1\nslo_ms = 5\n', "no such"),
        ("[[session]\n", "not readable as TOML"),
    ],
)
def test_a_bad_sessions_file_is_one_line(
    run_cli: RunCli, tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "sessions.toml"
    path.write_text(text)
    (tmp_path / "encoder.json").write_text((SESSIONS.parent / "encoder.json").read_text())
    code, _, err = run_cli("serve-plan", str(path))
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_a_hugging_face_model_is_timed_and_served_on_its_inputs_alone() -> None:
    pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode

    from lightspeed.serving.engine import Engine
    from lightspeed.workload.hf import hf_workload

    workload = hf_workload("hf:gpt2?n_layer=2&n_embd=64&n_head=4&vocab_size=1000&seq_len=32")
    found = latency_by_batch(workload, [2], hardware=FAKE_CPU, budget_s=0.01)
    engine = Engine(workload)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        engine.model(input_ids=engine.template(2)["input_ids"])
    # every matrix product torch's own counter sees, and the elementwise work beside them
    counted = counter.get_total_flops()
    assert counted < found.batches[0].flops < 1.1 * counted
    assert [leaf.name for leaf in engine.schema.leaves] == ["input_ids"]  # no labels
    samples = [engine.sample(0), engine.sample(1)]
    answers = engine.run(samples)
    with torch.inference_mode():
        direct = engine.model(input_ids=torch.from_numpy(samples[1]["input_ids"])[None]).logits
    assert answers[1]["logits"].shape == (32, 1000)
    assert torch.allclose(torch.from_numpy(answers[1]["logits"]), direct[0], atol=1e-5)
