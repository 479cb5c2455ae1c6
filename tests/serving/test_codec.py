"""A request to `lightspeed serve`, read and checked: each refusal's status and reason,
and the answers split back into each sample's part."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest

from lightspeed.serving.codec import (
    Leaf,
    RequestError,
    Schema,
    decode,
    request_body,
    request_start,
    rows,
)

IMAGE = Schema((Leaf(key=0, shape=(3, 2), dtype=np.dtype("float32")),))
PAIR = Schema(
    (
        Leaf(key="users", shape=(), dtype=np.dtype("int64")),
        Leaf(key="items", shape=(), dtype=np.dtype("int64")),
    )
)


def refusal(body: bytes, content_type: str, schema: Schema = IMAGE) -> tuple[int, str]:
    with pytest.raises(RequestError) as caught:
        decode(body, content_type, schema)
    return caught.value.status, caught.value.reason


def test_one_tensor_as_json_with_or_without_its_batch_dimension() -> None:
    values = [[1, 2], [3, 4], [5.5, 6]]
    for inputs in (values, [values]):
        sample = decode(orjson.dumps({"inputs": inputs}), "application/json", IMAGE)
        assert sample["0"].dtype == np.float32 and sample["0"].shape == (3, 2)
        assert sample["0"][2, 0] == 5.5


def test_several_tensors_by_name_and_as_npz() -> None:
    body = orjson.dumps({"inputs": {"users": 7, "items": 3}})
    sample = decode(body, "application/json; charset=utf-8", PAIR)
    assert (int(sample["users"]), int(sample["items"])) == (7, 3)
    npz = request_body(sample, PAIR, "application/x-npy")
    again = decode(npz, "application/x-npy", PAIR)
    assert (int(again["users"]), int(again["items"])) == (7, 3)


def test_a_body_round_trips_in_both_encodings() -> None:
    sample = {"0": np.arange(6, dtype=np.float32).reshape(3, 2)}
    for kind in ("application/json", "application/x-npy"):
        back = decode(request_body(sample, IMAGE, kind), kind, IMAGE)
        assert np.array_equal(back["0"], sample["0"])


def test_each_malformed_request_gets_its_status_and_reason() -> None:
    assert refusal(b"{bad", "application/json")[0] == 400
    assert refusal(b"[1, 2]", "application/json") == (
        400,
        'the JSON body must be an object {"inputs": …}.',
    )
    assert refusal(b"x", "text/plain")[0] == 415
    assert refusal(b"not npy", "application/x-npy")[0] == 400
    status, reason = refusal(orjson.dumps({"inputs": [[1, 2]]}), "application/json")
    assert status == 422 and "shape [1, 2] where [3, 2]" in reason
    status, reason = refusal(orjson.dumps({"inputs": [[1, 2], [3]]}), "application/json")
    assert status == 422 and "rectangular" in reason
    status, reason = refusal(orjson.dumps({"inputs": [["a", "b"]] * 3}), "application/json")
    assert status == 422 and "<U1 values" in reason
    floats = orjson.dumps({"inputs": {"users": 1.5, "items": 2}})
    status, reason = refusal(floats, "application/json", PAIR)
    assert status == 422 and "floats where integers (int64)" in reason
    status, reason = refusal(orjson.dumps({"inputs": {"users": 1}}), "application/json", PAIR)
    assert (status, reason) == (
        422,
        "inputs ['users'] given where ['users', 'items'] are expected"
        " (users int64 [], items int64 []).",
    )
    out = io.BytesIO()
    np.save(out, np.zeros((3, 2), np.float32))
    assert refusal(out.getvalue(), "application/x-npy", PAIR)[0] == 422


def test_outputs_are_split_by_sample_and_shared_parts_given_whole() -> None:
    logits = np.arange(6).reshape(3, 2)
    split = rows({"logits": logits, "loss": np.float32(1.5)}, 3)
    assert [r["logits"].tolist() for r in split] == [[0, 1], [2, 3], [4, 5]]
    assert all(r["loss"] == 1.5 for r in split)
    assert [r[1].tolist() for r in rows((logits, logits * 2), 3)] == [[0, 2], [4, 6], [8, 10]]


def test_a_missing_serve_extra_is_one_line_with_the_fix() -> None:
    from lightspeed.errors import ConfigError
    from lightspeed.serving import require

    require("json")
    with pytest.raises(ConfigError, match=r"no_such_module: install the serve extra"):
        require("json", "no_such_module")


def test_a_request_start_header_in_any_unit_of_unix_time() -> None:
    moment = 1_790_000_000.25
    for text in ("t=1790000000.25", "1790000000250", "t=1790000000250000", "1790000000250000000"):
        stamp = request_start(text)
        assert stamp is not None and abs(stamp - moment) < 1e-3, text
    for garbled in (None, "", "t=", "soon", "t=-5", "inf", "nan"):
        assert request_start(garbled) is None, garbled
