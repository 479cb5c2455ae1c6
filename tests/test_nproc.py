"""Steps and links measured in several processes under torchrun: `lightspeed time
--nproc`, `lightspeed hw link`, the fit of a link to ping-pong times, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import RunCli, printed_labels
from lightspeed import glossary
from lightspeed.errors import ConfigError
from lightspeed.facts.hardware import Hardware
from lightspeed.hardware.links import catalog_link, link_ids
from lightspeed.measure.distributed.link_bench import fit_link
from lightspeed.report.data_parallel_report import link_document, link_list_document

WORKLOADS = Path(__file__).parent / "data" / "workloads.py"


def test_fit_link_reads_latency_and_bandwidth_off_the_times() -> None:
    # One way: 50 µs + bytes / 2 GB/s, for messages of 4 B to 64 MiB.
    sizes = [4 * 4**i for i in range(13)]
    times = {s: 50e-6 + s / 2e9 for s in sizes}
    measured = fit_link(times, link_id="measured-gloo-loopback", backend="gloo")
    # The least half round trip up to 1 KiB is the 4 B message's: 50 µs + 2 ns.
    assert measured.link.latency_s == pytest.approx(50e-6 + 4 / 2e9)
    assert measured.latency_bytes == (4, 16, 64, 256, 1024)
    # Messages of 1 MiB and more lie on a line of slope 1 / 2e9 s/B.
    assert measured.link.bandwidth_bytes_per_s == pytest.approx(2e9)
    assert measured.bandwidth_bytes == (2**20, 4 * 2**20, 16 * 2**20, 64 * 2**20)
    assert measured.link.id == "measured-gloo-loopback"


def test_fit_link_with_small_messages_only() -> None:
    # Below 1 MiB the two largest messages give the slope: (4096 − 1024) B over 3 µs.
    times = {4: 10e-6, 1024: 11e-6, 4096: 14e-6}
    measured = fit_link(times, link_id="x", backend="gloo")
    assert measured.link.latency_s == 10e-6
    assert measured.link.bandwidth_bytes_per_s == pytest.approx(3072 / 3e-6)
    with pytest.raises(ConfigError):
        fit_link({4: 1e-5}, link_id="x", backend="gloo")


def test_link_reports_print_only_glossary_terms() -> None:
    measured = fit_link({4: 1e-5, 2**20: 1e-3, 2**22: 4e-3}, link_id="x", backend="gloo")
    docs = [link_document(measured), link_list_document([catalog_link(i) for i in link_ids()])]
    missing = {label for d in docs for label in printed_labels(d) if glossary.lookup(label) is None}
    assert missing == set()


@pytest.mark.usefixtures("calibrated_cpu")
def test_time_in_two_processes(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    code, out, err = run_cli(
        "time", "mlp-tiny", "--nproc", "2", "--threads", "1", "--hardware", "local",
        "--budget", "0.2", "--warmup", "1", "--json", str(path),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(path.read_text())
    assert doc["data_parallel"] == {
        "processes": 2,
        "per_device_batch": 32,
        "threads_per_process": 1,
        "backend": "gloo",
    }
    # The throughput counts both processes' samples: 2 × 32 a step.
    timing = doc["timing"]
    assert doc["workload"]["batch_size"] == 64
    steps = timing["replicates"] * timing["steps_per_replicate"]
    assert timing["samples_per_s"] == pytest.approx(
        64 * steps / (sum(timing["times_s"]) * timing["steps_per_replicate"])
    )
    assert timing["min_s"] <= timing["median_s"] <= timing["max_s"]
    assert "processes" in out and "DistributedDataParallel over gloo" in out


def test_a_workload_that_raises_in_a_process_is_one_line(run_cli: RunCli) -> None:
    code, out, err = run_cli(
        "time", f"{WORKLOADS}:broken_loss", "--nproc", "2", "--hardware", "h100-sxm"
    )
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(
        "lightspeed: error: workload 'broken-loss': loss(model, batch) raised KeyError"
    )


def test_a_workload_with_its_own_step_is_refused(run_cli: RunCli) -> None:
    code, _, err = run_cli("time", "dcgan-tiny", "--nproc", "2", "--hardware", "h100-sxm")
    assert code == 2
    assert err.startswith("lightspeed: error: workload 'dcgan-tiny' runs its own step")


def test_link_between_two_processes(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "link.json"
    code, _, err = run_cli("hw", "link", "--max-bytes", "4096", "--json", str(path))
    assert code == 0, err
    doc = json.loads(path.read_text())
    times = {int(k): v for k, v in doc["half_round_trip_s"].items()}
    assert sorted(times) == [4, 16, 64, 256, 1024, 4096]
    assert doc["link"]["id"] == "measured-gloo-loopback"
    assert doc["backend"] == "gloo" and doc["processes"] == 2
    # The fit the document reports is the one its own times give.
    assert doc["link"]["latency_s"] == min(times[s] for s in (4, 16, 64, 256, 1024)) > 0
    expected = fit_link(times, link_id="measured-gloo-loopback", backend="gloo")
    assert doc["link"]["bandwidth_bytes_per_s"] == pytest.approx(
        expected.link.bandwidth_bytes_per_s
    )


def test_catalog_links_listed(run_cli: RunCli) -> None:
    code, out, _ = run_cli("hw", "list", "--links", "--json")
    assert code == 0
    assert [k["id"] for k in json.loads(out)["links"]] == link_ids()


def test_link_needs_two_processes(run_cli: RunCli, calibrated_cpu: Hardware) -> None:
    code, _, err = run_cli("hw", "link", "--nproc", "1")
    assert code == 2 and err == "lightspeed: error: --nproc 1: a link needs at least 2 processes.\n"
