"""The Python API: `lightspeed.profile`, and a Profile saved to a file and loaded back."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import lightspeed
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.measure.capture import without_mode_artifacts
from lightspeed.report.profile_report import profile_document
from lightspeed.report.render_json import dumps, render


def test_profile_saves_and_loads_back(calibrated_cpu: Hardware, tmp_path: Path) -> None:
    profile = lightspeed.profile("mlp-tiny", budget_s=0.2, steps=2)
    assert profile.hardware == calibrated_cpu
    path = lightspeed.save_profile(profile, tmp_path / "p.json")
    assert lightspeed.load_profile(path) == profile
    assert json.loads(path.read_text())["document"] == "profile"


def test_every_captured_op_of_a_tiny_step_is_timed(calibrated_cpu: Hardware) -> None:
    # The capture's own detaches are dropped, so no op is left without a profiled time.
    profile = lightspeed.profile("transformer-encoder-tiny", budget_s=0.2)
    assert profile.ops
    assert [op.name for op in profile.ops if op.time_s is None] == []
    assert [op.index for op in profile.ops] == list(range(len(profile.ops)))


def test_profile_takes_a_hardware_object_and_a_catalog_id(calibrated_cpu: Hardware) -> None:
    on_a100 = lightspeed.profile("mlp-tiny", hardware="a100-80gb-sxm", budget_s=0.1, steps=1)
    assert on_a100.hardware.id == "a100-80gb-sxm"
    other = dataclasses.replace(calibrated_cpu, name="another CPU")
    assert lightspeed.profile("mlp-tiny", hardware=other, budget_s=0.1).hardware == other


def test_profile_rejects_zero_steps() -> None:
    with pytest.raises(ConfigError, match="steps=0 must be at least 1"):
        lightspeed.profile("mlp-tiny", steps=0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not readable as JSON"),
        ("[1, 2]", "a profile is a JSON object"),
        ('{"schema_version": 2, "document": "timing"}', "not a lightspeed profile"),
        ('{"schema_version": 2, "document": "profile"}', "the profile document is damaged"),
    ],
)
def test_loading_a_bad_file_says_what_is_wrong(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        lightspeed.load_profile(path)


def _record(index: int, name: str, time_s: float | None, bytes_read: int = 0) -> OpRecord:
    return OpRecord(
        index=index,
        name=name,
        module="",
        phase=Phase.FORWARD,
        input_shapes=((4,),),
        input_dtypes=("float32",),
        output_shapes=((4,),),
        output_dtypes=("float32",),
        flops=0,
        macs=None,
        bytes_read=bytes_read,
        bytes_written=0,
        time_s=time_s,
    )


def test_only_detaches_that_move_nothing_are_capture_artifacts() -> None:
    ops = [
        _record(0, "aten::mm", None, bytes_read=64),
        _record(1, "aten::detach", None),  # added by the capture, or the step's own: dropped
        _record(2, "aten::detach", None, bytes_read=16),  # not a view: kept
        _record(3, "aten::relu", None, bytes_read=16),
    ]
    kept = without_mode_artifacts(ops)
    assert [(op.index, op.name, op.bytes) for op in kept] == [
        (0, "aten::mm", 64),
        (1, "aten::detach", 16),
        (2, "aten::relu", 16),
    ]


def test_a_profile_of_schema_1_loads_and_analyses_as_it_did() -> None:
    """`mlp-tiny-schema1.json` was written by the schema-1 release: its facts load, and
    the analysis derived from them is the one it recorded, up to the renamed keys and
    names, and the one threshold unified since (small ops: 10 → 20 µs)."""
    path = Path(__file__).parent / "data" / "profiles" / "mlp-tiny-schema1.json"
    old = json.loads(path.read_text())
    profile = lightspeed.load_profile(path)
    new = json.loads(dumps(render(profile_document(lightspeed.analyse(profile)))))
    assert (old["schema_version"], new["schema_version"]) == (1, 4)
    assert old["timing"]["step_time_s"] == new["timing"]["median_s"]
    assert old["timing"]["n"] == new["timing"]["replicates"]
    # Schema 3 keeps the memory over the step, which schema 1 did not record.
    assert new["memory"].pop("over_step") is None
    # Schema 4 counts the parameter tensors, which schema 1 did not.
    assert new["workload"].pop("parameter_tensors") is None
    # The TARGET a workload was loaded from is kept since; schema 1 did not keep it.
    assert new["workload"].pop("target") is None
    assert new["workload"].pop("jobs") == 1  # fused jobs are counted since
    assert new["workload"].pop("mixed") is False  # steps in bf16 were pure, not autocast
    for key in ("workload", "phases", "modules", "memory"):
        assert old[key] == new[key], key
    # The calibration has since recorded its kernels and its canary: added keys, empty
    # for a calibration made before.
    old_cal, new_cal = old["hardware"].pop("calibration"), new["hardware"].pop("calibration")
    # The hardware has since recorded its datasheet facts: added keys, empty for a
    # calibrated device.
    assert {k: new["hardware"].pop(k) for k in set(new["hardware"]) - set(old["hardware"])} == {
        "matrix_peak_flops_per_s": {},
        "clock_hz": None,
        "l2_bytes": None,
        "board_power_w": None,
        "vendor": None,
        "process_nm": None,
        "transistors_per_mm2": None,
    }
    assert old["hardware"] == new["hardware"]
    assert {k: new_cal[k] for k in old_cal} == old_cal
    assert {k: v for k, v in new_cal.items() if k not in old_cal} == {
        "best_compute_kernel": {},
        "compute_kernel_flops_per_s": {},
        "canary_kernel": None,
        "canary_flops_per_s": None,
        "canary_before_flops_per_s": None,
    }
    # Schema 2's totals add the time in ops with unknown FLOPs (none here).
    assert {k: new["totals"][k] for k in old["totals"]} == old["totals"]
    assert new["totals"]["unknown_flops_time_s"] == 0
    assert (old["bound"], new["bound"]) == ("cpu-launch-overhead", "overhead")
    # An op's memory format (channels_last) is recorded since; schema 1 did not know it.
    derived = ("bound", "channels_last")
    assert all(op["channels_last"] is None for op in new["ops"])
    for was, now in zip(old["ops"], new["ops"], strict=True):
        assert {k: v for k, v in was.items() if k not in derived} == {
            k: v for k, v in now.items() if k not in derived
        }
        # An op's bound changes only where the small-op threshold moved.
        if was["bound"] != now["bound"]:
            assert (was["bound"], now["bound"]) == ("memory", "overhead") or (
                was["bound"],
                now["bound"],
            ) == ("compute", "overhead")
            assert 10e-6 <= now["time_s"] < 20e-6


def test_profiled_steps_fit_about_two_seconds() -> None:
    from lightspeed.measure.profile_run import profiled_steps_for

    assert [profiled_steps_for(s) for s in (0.0, 0.007, 0.6, 0.8, 1.5, 5.9)] == [3, 3, 3, 2, 1, 1]


def test_the_facades_predict_stays_the_function_once_its_package_is_imported() -> None:
    """Importing `lightspeed.predict.fusion` (as loading a saved profile does) binds the
    package `lightspeed.predict` on the root, which hid the facade's function."""
    code = (
        "import lightspeed, lightspeed.predict.fusion\n"
        "from lightspeed.predict import whatif\n"
        "lightspeed.save_profile\n"
        "assert lightspeed.predict is whatif.predict, lightspeed.predict\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
