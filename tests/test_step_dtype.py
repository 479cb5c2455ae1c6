"""`--dtype`: one meaning in every command (bf16 is autocast, bf16-pure the model cast),
said in the JSON and on the workload line, and read back from old files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import FAKE_CPU, RunCli
from lightspeed.dtypes import Precision, StepDtype
from lightspeed.errors import UnknownNameError
from lightspeed.facts.hardware import Hardware
from lightspeed.report.profile_json import load_profile, profile_from_doc
from lightspeed.workflows.profile import profile_shapes

DATA = Path(__file__).parent / "data"


def test_each_step_dtype_says_its_math_and_what_is_cast() -> None:
    facts = {d: (d.precision, d.mixed, d.stored, d.label) for d in StepDtype}
    assert facts == {
        StepDtype.FP32: (Precision.FP32, False, Precision.FP32, "fp32"),
        StepDtype.BF16: (Precision.BF16, True, Precision.FP32, "bf16 autocast"),
        StepDtype.FP16: (Precision.FP16, True, Precision.FP32, "fp16 autocast"),
        StepDtype.BF16_PURE: (Precision.BF16, False, Precision.BF16, "bf16 pure"),
        StepDtype.FP16_PURE: (Precision.FP16, False, Precision.FP16, "fp16 pure"),
    }
    assert all(StepDtype.of(d.precision, mixed=d.mixed) is d for d in StepDtype)
    assert StepDtype.parse("BF16-Pure") is StepDtype.BF16_PURE


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("fp8", "choose one of fp32, bf16, fp16, bf16-pure, fp16-pure"),
        ("bf16pure", "Did you mean 'bf16-pure'"),
    ],
)
def test_an_unknown_step_dtype_names_the_choices(name: str, message: str) -> None:
    with pytest.raises(UnknownNameError, match=message):
        StepDtype.parse(name)


def test_time_runs_bf16_under_autocast(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    path = tmp_path / "t.json"
    code, out, err = run_cli(
        "time", "mlp-tiny", "--dtype", "bf16", "--warmup", "1", "--budget", "0.05",
        "--min-replicates", "2", "--json", str(path),
    )  # fmt: skip
    assert code == 0, err
    assert "mlp-tiny: batch 32, bf16 autocast on cpu" in out
    workload = json.loads(path.read_text())["workload"]
    assert (workload["dtype"], workload["mixed"]) == ("bf16", True)


def test_predict_takes_bf16_as_autocast_and_refuses_to_predict_a_pure_step(
    run_cli: RunCli, calibrated_cpu: Hardware, tmp_path: Path
) -> None:
    saved = str(DATA / "profiles" / "mlp-tiny-schema1.json")  # an fp32 step
    path = tmp_path / "p.json"
    code, _, err = run_cli("predict", saved, "--dtype", "bf16", "--json", str(path))
    assert code == 0, err
    doc = json.loads(path.read_text())
    assert doc["prediction"]["changes"] == {"dtype": "bf16"}
    forward = [o for o in doc["ops"] if o["phase"] == "forward" and o["name"] == "aten::addmm"]
    assert len(forward) == 3 and all(o["input_dtypes"] == ["bfloat16"] * 3 for o in forward)
    # autocast leaves the parameters fp32: 4 bytes each, as measured.
    params = doc["workload"]["parameter_count"]
    assert doc["memory"]["parameters_bytes"] == 4 * params

    code, _, err = run_cli("predict", saved, "--dtype", "bf16-pure")
    assert code == 2
    assert "--dtype bf16-pure: a prediction changes the precision by autocast only" in err


def test_a_profile_saved_before_mixed_was_written_loads_as_it_ran() -> None:
    # Schema 1 has no "mixed": then every step was cast whole (here fp32).
    old = load_profile(DATA / "profiles" / "mlp-tiny-schema1.json")
    assert (old.workload.precision, old.workload.mixed) == (Precision.FP32, False)
    doc = json.loads((DATA / "profiles" / "mlp-tiny-schema1.json").read_text())
    doc["workload"]["dtype"] = "bf16"  # a bf16 step then was a pure one
    assert profile_from_doc(doc).workload.dtype is StepDtype.BF16_PURE


@pytest.mark.parametrize(("dtype", "element_bytes"), [("bf16", 4), ("bf16-pure", 2)])
def test_a_hugging_face_model_is_analysed_from_its_shapes_either_way(
    dtype: str, element_bytes: int
) -> None:
    pytest.importorskip("transformers")
    target = "hf:gpt2?n_layer=1&n_embd=32&n_head=2&vocab_size=100&seq_len=8"
    shapes = profile_shapes(target, dtype=dtype, hardware=FAKE_CPU, batch_size=2)
    assert shapes.workload.dtype is StepDtype.parse(dtype)
    assert shapes.memory is not None and shapes.workload.parameter_count is not None
    assert shapes.memory.parameters_bytes == element_bytes * shapes.workload.parameter_count
    products = [op for op in shapes.ops if op.name in ("aten::addmm", "aten::mm")]
    assert products and all("bfloat16" in op.input_dtypes for op in products)
