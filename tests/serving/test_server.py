"""`lightspeed serve` for real, on loopback: the answers, every refusal's status, the
health and metrics endpoints, `lightspeed loadgen` against it, and SIGTERM under load
answering every request the server accepted."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

DATA = Path(__file__).parent.parent / "data" / "serving"
PROFILE = DATA / "mlp-tiny.json"


def lightspeed(*args: str) -> list[str]:
    return [sys.executable, "-m", "lightspeed", *args]


def start_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    """`lightspeed serve ARGS --port 0` started, and its URL once it listens."""
    process = subprocess.Popen(
        lightspeed("serve", *args, "--port", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline()  # the announcement, once listening
    assert " at http://127.0.0.1:" in line, process.stderr.read()
    return process, line.split(" at ")[1].split("/predict")[0]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    process, url = start_server(
        "mlp-tiny", "--slo", "200ms", "--max-body", "64KiB", "--profile", str(PROFILE)
    )
    yield url, process
    if process.poll() is None:
        process.kill()
        process.wait()


def call(
    url: str, body: bytes | None = None, kind: str = "application/json", method: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", kind)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_a_sample_is_answered_in_either_encoding(server: tuple[str, object]) -> None:
    url, _ = server
    for kind, query in (("application/json", ""), ("application/x-npy", "?format=npy")):
        status, _, body = call(f"{url}/sample{query}")
        assert status == 200
        status, _, answer = call(f"{url}/predict", body, kind)
        assert status == 200, answer
        data = json.loads(answer)
        assert len(data["outputs"]) == 10 and data["batch_size"] >= 1  # 10 classes
        assert data["queue_ms"] >= 0 and data["compute_ms"] > 0


def test_each_malformed_request_gets_its_4xx(server: tuple[str, object]) -> None:
    url, _ = server
    predict = f"{url}/predict"
    assert call(predict, b"{bad")[0] == 400
    assert call(predict, b"x", "text/plain")[0] == 415
    assert call(predict, json.dumps({"inputs": [1.0, 2.0]}).encode())[0] == 422
    strings = json.dumps({"inputs": ["a"] * 64}).encode()
    status, _, body = call(predict, strings)
    assert status == 422 and b"numbers are expected" in body
    big = json.dumps({"inputs": [0.5] * 40_000}).encode()  # over --max-body 64 KiB
    assert call(predict, big)[0] == 413
    assert call(f"{url}/nope")[0] == 404
    assert call(predict, method="GET")[0] == 405


def test_a_request_that_waited_in_front_of_the_server_counts_that_wait(
    server: tuple[str, object],
) -> None:
    url, _ = server
    body = call(f"{url}/sample")[2]
    for stamp, expected in ((time.time() - 60, 503), (time.time(), 200)):
        request = urllib.request.Request(f"{url}/predict", data=body)
        request.add_header("Content-Type", "application/json")
        request.add_header("X-Request-Start", f"t={stamp:.3f}")  # as nginx's ${msec}
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
            assert b"miss its deadline" in error.read()
        assert status == expected


def test_health_and_metrics(server: tuple[str, object]) -> None:
    url, _ = server
    status, _, body = call(f"{url}/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    call(f"{url}/predict", call(f"{url}/sample")[2])
    status, _, text = call(f"{url}/metrics")
    metrics = text.decode()
    assert 'lightspeed_requests_total{outcome="answered"}' in metrics
    assert "lightspeed_batch_size_bucket" in metrics and "lightspeed_queue_length" in metrics
    assert "process_resident_memory_bytes" in metrics
    assert "lightspeed_model_process_resident_memory_bytes" in metrics  # the worker's
    info = json.loads(call(url)[2])
    assert info["model"] == "mlp-tiny" and info["policy"] == "slo-aware"


def test_loadgen_drives_it_open_loop(server: tuple[str, object], tmp_path: Path) -> None:
    url, _ = server
    out = tmp_path / "load.json"
    done = subprocess.run(
        lightspeed(
            "loadgen",
            url,
            "--rate",
            "100",
            "--duration",
            "0.5",
            "--slo",
            "200ms",
            "--json",
            str(out),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(out.read_text())["load"]["runs"][0]
    assert run["offered"] > 20 and run["errors"] == 0
    assert run["ok"] + run["dropped"] == run["offered"]


def test_sigterm_under_load_answers_every_accepted_request() -> None:
    # 20 ms a batch of at most 4: 64 requests take 320 ms, most still waiting at SIGTERM
    process, url = start_server(
        f"{DATA / 'slow_model.py'}:slow",
        "--slo",
        "5s",
        "--max-batch",
        "4",
        "--profile",
        str(DATA / "slow.json"),
    )
    assert process.stderr is not None
    payload = json.dumps({"inputs": [1.0, 2.0, 3.0, 4.0]}).encode()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        futures = [pool.submit(outcome, f"{url}/predict", payload) for _ in range(64)]
        while not json.loads(call(f"{url}/health")[2])["queued"]:
            pass  # until requests wait behind the running batch
        process.send_signal(signal.SIGTERM)
        outcomes = [f.result() for f in futures]
    # uvicorn drains, then ends the process by the signal it caught
    assert process.wait(timeout=30) in (0, -signal.SIGTERM)
    assert "drained" in process.stderr.read()
    answered = [o for o in outcomes if o in (200, 503)]
    # a request the server never took may be refused; none it took goes unanswered
    assert set(outcomes) - {200, 503} <= {"refused"}
    assert outcomes.count(200) >= 8 and len(answered) + outcomes.count("refused") == 64


def test_a_full_queue_refuses_at_the_door_with_a_retry_time() -> None:
    # one request at a time, 20 ms each, two may wait: most of 16 at once find it full
    process, url = start_server(
        f"{DATA / 'slow_model.py'}:slow",
        "--slo",
        "5s",
        "--max-batch",
        "1",
        "--max-queue",
        "2",
        "--profile",
        str(DATA / "slow.json"),
    )
    try:
        payload = json.dumps({"inputs": [1.0, 2.0, 3.0, 4.0]}).encode()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda _: call(f"{url}/predict", payload), range(16)))
    finally:
        process.kill()
        process.wait()
    statuses = [status for status, _, _ in replies]
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 3, statuses
    full = [r for r in replies if r[0] == 429]
    assert full and all(b"the queue is full (2 waiting)" in body for _, _, body in full)
    retry = [{k.lower(): v for k, v in headers.items()}["retry-after"] for _, headers, _ in full]
    assert all(int(seconds) >= 1 for seconds in retry)


def outcome(url: str, body: bytes) -> int | str:
    try:
        return call(url, body)[0]
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return "refused"
        return f"lost: {error.reason}"
    except (ConnectionError, OSError) as error:
        return f"lost: {error}"
