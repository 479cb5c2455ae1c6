"""The GPUs a trace records: each device's name, SM count and memory from
`deviceProperties`, and the catalog entry each shared trace's devices map to.

`tests/data/traces/device-properties.json` holds the `deviceProperties` of every trace
of the shared collection, copied unchanged, so the mapping is checked without reading
the traces' megabytes of events; where the collection is at hand, a test checks the
copy against the files' heads."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from trace_paths import SHARED_TRACES, TRACES, trace

from lightspeed.hardware import catalog_id_for_device
from lightspeed.trace.events import TraceDevice
from lightspeed.trace.load import load_trace

PROPERTIES: dict[str, list[dict[str, Any]] | None] = json.loads(
    (TRACES / "device-properties.json").read_text("utf-8")
)

# Each shared trace: the catalog entry its devices map to; None where none is named or
# the device is no catalogued GPU (an MTIA).
EXPECTED = {
    "hta-a100-80gb-recsys-train-rank0of16.json.gz": "a100-80gb-sxm",
    # "NVIDIA A100-PG509-200", 108 SMs, 39.4 GiB: a board of the A100 SXM4 40GB.
    "hta-a100-alexnet-benchmark.json.gz": "a100-40gb-sxm",
    "hta-a100-cuda-event-sync.json.gz": "a100-40gb-sxm",
    "hta-a100-ddp-train-rank0of2.json.gz": "a100-40gb-sxm",
    "hta-a100-recsys-train-rank3of8.json.gz": "a100-40gb-sxm",
    "hta-cpu-only-rank34.json.gz": None,
    # "AMD Radeon Graphics", 104 CUs, 64 GiB: one GCD of an MI250 (an MI210 is alike).
    "hta-mi250-minitoy-train.json.gz": "mi250-gcd",
    "hta-mtia-inference-rank0.json.gz": None,
    "hta-recsys-128ranks-sampled-rank0.json.gz": None,
    "hta-recsys-128ranks-sampled-rank1.json.gz": None,
    "hta-v100-ddp-cnn-train-rank0.json.gz": "v100-sxm2",
    "hta-v100-recsys-train-rank1of2.json.gz": "v100-sxm2",
    "hta-v100-train-memprof-rank1of2.json.gz": "v100-sxm2",
    "tracelens-b200-eager.json.gz": "b200",
    "tracelens-h100-bert-small-inference.json.gz": "h100-sxm",
    "tracelens-h100-qwen-0.5b-inference.json.gz": "h100-sxm",
    "tracelens-h100-timesformer-inference.json.gz": "h100-sxm",
    "tracelens-h100-vit-image-inference.json.gz": "h100-sxm",
    "tracelens-mi300-resnet-checkpointed-train.json.gz": "mi300x",
}


def test_every_shared_trace_has_an_expected_entry() -> None:
    assert PROPERTIES.keys() == EXPECTED.keys()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_shared_trace_maps_to_its_catalog_entry(name: str, tmp_path: Path) -> None:
    # A trace of one kernel with the shared trace's deviceProperties, read by the reader.
    document: dict[str, Any] = {
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1}]
    }
    if PROPERTIES[name] is not None:
        document["deviceProperties"] = PROPERTIES[name]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document))
    devices = load_trace(path).devices
    assert len(devices) == len(PROPERTIES[name] or [])
    ids = {catalog_id_for_device(d.name, d.sm_count, d.memory_bytes) for d in devices}
    assert ids == ({EXPECTED[name]} if devices else set())


def test_the_reader_keeps_each_devices_sm_count_and_memory() -> None:
    devices = load_trace(trace("hta-mi250-minitoy-train")).devices
    # Four GCDs of 104 CUs and 68,702,699,520 B (64 GiB less 16 MiB) each.
    assert (
        devices
        == (TraceDevice(name="AMD Radeon Graphics", sm_count=104, memory_bytes=68_702_699_520),) * 4
    )


def test_a_device_without_sm_count_or_memory_keeps_its_name(tmp_path: Path) -> None:
    # The MTIA trace records neither numSms nor totalGlobalMem; a made-up one gives junk.
    document = {
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1}],
        "deviceProperties": [
            {"id": 0, "name": "ARTEMIS"},
            {"id": 1, "name": "X", "numSms": "many", "totalGlobalMem": -1},
            {"id": 2},
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document))
    assert load_trace(path).devices == (TraceDevice(name="ARTEMIS"), TraceDevice(name="X"))


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="the shared trace collection is not at hand")
def test_the_copy_is_what_the_shared_traces_record() -> None:
    names = sorted(p.name for p in SHARED_TRACES.glob("*.json.gz"))
    assert names == sorted(PROPERTIES)
    for name in names:
        # Kineto writes deviceProperties before the events: the file's head holds it.
        with gzip.open(SHARED_TRACES / name, "rt", encoding="utf-8") as fh:
            head = fh.read(1 << 16)
        at = head.find('"deviceProperties"')
        if at < 0:
            assert PROPERTIES[name] is None, name
            continue
        recorded, _ = json.JSONDecoder().raw_decode(head, head.index("[", at))
        assert recorded == PROPERTIES[name], name
