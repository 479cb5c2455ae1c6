"""What a request to `lightspeed serve` is, checked, and what its answer is.

A request is one sample: the tensors the model's inference needs, shaped as the
workload's `batch(1)` makes them, with or without that leading batch dimension of 1.

- JSON (`application/json`): `{"inputs": X}`, X a nested list when the model takes one
  tensor, or when it takes several an object of them by name (a dict batch's keys) or
  position ("0", "1", … of a tuple batch).
- NumPy (`application/x-npy`, `application/octet-stream`): the bytes of `numpy.save` for
  one tensor, or of `numpy.savez` with the same names for several.

Numbers are checked against each tensor's kind: integers where integers are expected
(token ids; floats are refused rather than truncated), any real number where floats are
(cast to the model's dtype). Each refusal is a `RequestError` carrying the HTTP status
and one line saying what was wrong: 400 unreadable, 413 too large, 415 content type,
422 the wrong names, shape or dtype.

The answer is JSON: `{"outputs": Y, "batch_size": n, "queue_ms": q, "compute_ms": c}`,
Y the sample's row of each output (a nested list, or an object or list of them as the
model returned them), n the batch it ran in, q the milliseconds it waited and c its
batch's run.

A request may say when it reached the front of the service in an `X-Request-Start`
header, as load balancers set it (nginx: `proxy_set_header X-Request-Start
"t=${msec}"`): Unix time in seconds, milliseconds, microseconds or nanoseconds (told
apart by magnitude), with or without `t=`. Its deadline then counts from that moment,
so time spent in front of the server (a balancer's queue, the listening socket's
backlog of a server too busy to read) counts against the SLO, as the client sees it.
"""

from __future__ import annotations

import dataclasses
import io
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

JSON_TYPES = frozenset({"application/json"})
NPY_TYPES = frozenset({"application/x-npy", "application/octet-stream"})


class RequestError(Exception):
    """A request refused: the HTTP `status` to answer and the one-line `reason`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One input tensor of a sample: its `key` in the batch (None: the batch is that
    tensor; an int: a tuple batch's position; a str: a dict batch's key), its shape
    without the batch dimension, and its NumPy dtype."""

    key: int | str | None
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def name(self) -> str:
        """How a request names it: '' for the one tensor, else its key as text."""
        return "" if self.key is None else str(self.key)


@dataclasses.dataclass(frozen=True)
class Schema:
    """The input tensors one request carries, in the batch's order."""

    leaves: tuple[Leaf, ...]

    def describe(self) -> str:
        """The expected inputs in one line: 'float32 [3, 32, 32]' (one tensor) or
        'users int64 [], items int64 []'."""
        if len(self.leaves) == 1:
            return f"{self.leaves[0].dtype} {list(self.leaves[0].shape)}"
        return ", ".join(f"{leaf.name} {leaf.dtype} {list(leaf.shape)}" for leaf in self.leaves)


Sample = dict[str, np.ndarray]  # a request's arrays by leaf name, without a batch dimension


def decode(body: bytes, content_type: str, schema: Schema) -> Sample:
    """The arrays of one request, checked against `schema` (see the module's
    docstring); raises RequestError."""
    kind = content_type.split(";")[0].strip().lower()
    if kind in JSON_TYPES:
        return _check(_from_json(body, schema), schema)
    if kind in NPY_TYPES:
        return _check(_from_numpy(body, schema), schema)
    raise RequestError(
        415,
        f"content type {kind or 'none'!r} is not served; send application/json"
        " or application/x-npy.",
    )


def _from_json(body: bytes, schema: Schema) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(400, f"the body is not valid JSON ({exc}).") from None
    if not isinstance(data, dict) or "inputs" not in data:
        raise RequestError(400, 'the JSON body must be an object {"inputs": …}.')
    inputs = data["inputs"]
    if len(schema.leaves) == 1:
        return {schema.leaves[0].name: inputs}
    if not isinstance(inputs, dict):
        raise RequestError(
            422, f'"inputs" must be an object of the model\'s inputs: {schema.describe()}.'
        )
    return inputs


def _from_numpy(body: bytes, schema: Schema) -> dict[str, Any]:
    try:
        if zipfile.is_zipfile(io.BytesIO(body)):
            with np.load(io.BytesIO(body), allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
        array = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise RequestError(400, f"the body is not a .npy or .npz array ({exc}).") from None
    if len(schema.leaves) != 1:
        raise RequestError(
            422,
            f"the model takes several inputs ({schema.describe()}); send them as one .npz.",
        )
    return {schema.leaves[0].name: array}


def _check(given: Mapping[str, Any], schema: Schema) -> Sample:
    names = [leaf.name for leaf in schema.leaves]
    missing = [n for n in names if n not in given]
    extra = sorted(set(given) - set(names))
    if missing or extra:
        raise RequestError(
            422,
            f"inputs {sorted(given)} given where {names} are expected ({schema.describe()}).",
        )
    return {leaf.name: _array(given[leaf.name], leaf) for leaf in schema.leaves}


def _array(value: Any, leaf: Leaf) -> np.ndarray:
    label = f"input {leaf.name!r}" if leaf.name else "the input"
    try:
        array = np.asarray(value)
    except ValueError:
        raise RequestError(422, f"{label} is not a rectangular array of numbers.") from None
    if array.dtype.kind not in "biuf":
        raise RequestError(
            422, f"{label} holds {array.dtype} values where {leaf.dtype} numbers are expected."
        )
    if leaf.dtype.kind in "iu" and array.dtype.kind == "f":
        raise RequestError(422, f"{label} holds floats where integers ({leaf.dtype}) are expected.")
    if array.shape not in (leaf.shape, (1, *leaf.shape)):
        raise RequestError(
            422,
            f"{label} has shape {list(array.shape)} where {list(leaf.shape)}"
            f" (or {[1, *leaf.shape]}) is expected.",
        )
    return array.reshape(leaf.shape).astype(leaf.dtype, copy=False)


# Header stamps above these are in milliseconds, microseconds, nanoseconds (seconds
# reach 1e11 in the year 5138).
_STAMP_UNITS = ((1e17, 1e-9), (1e14, 1e-6), (1e11, 1e-3))


def request_start(header: str | None) -> float | None:
    """An `X-Request-Start` header's moment in Unix seconds; None when absent or not a
    time (a header a client garbled is ignored, not refused)."""
    if not header:
        return None
    text = header.strip().removeprefix("t=")
    try:
        value = float(text)
    except ValueError:
        return None
    if not value > 0 or value == float("inf"):
        return None
    for above, unit in _STAMP_UNITS:
        if value >= above:
            return value * unit
    return value


def request_body(arrays: Sample, schema: Schema, content_type: str = "application/json") -> bytes:
    """A request body carrying `arrays` (by leaf name, without the batch dimension) in
    `content_type`: what a client sends."""
    if content_type in JSON_TYPES:
        if len(schema.leaves) == 1:
            inputs: Any = arrays[schema.leaves[0].name]
        else:
            inputs = {name: array for name, array in arrays.items()}
        return orjson.dumps({"inputs": inputs}, option=orjson.OPT_SERIALIZE_NUMPY)
    out = io.BytesIO()
    if len(arrays) == 1:
        np.save(out, next(iter(arrays.values())), allow_pickle=False)
    else:
        np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


def answer(output: Any, batch_size: int, queue_s: float, compute_s: float) -> bytes:
    """The JSON answer to one request (see the module's docstring); `output` holds
    NumPy arrays, in lists, tuples or mappings as the model returned them."""
    return orjson.dumps(
        {
            "outputs": output,
            "batch_size": batch_size,
            "queue_ms": round(queue_s * 1e3, 3),
            "compute_ms": round(compute_s * 1e3, 3),
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )


def rows(output: Any, count: int) -> list[Any]:
    """`output` (NumPy arrays whose leading dimension is the batch of `count`, in lists,
    tuples or mappings) split into each sample's part; what does not lead with the batch
    (a scalar, a shared tensor) is given whole to every sample."""
    if isinstance(output, np.ndarray):
        if output.ndim and output.shape[0] == count:
            return list(output)
        return [output] * count
    if isinstance(output, Mapping):
        parts = {k: rows(v, count) for k, v in output.items()}
        return [{k: p[i] for k, p in parts.items()} for i in range(count)]
    if isinstance(output, Sequence) and not isinstance(output, str):
        columns = [rows(v, count) for v in output]
        return [[c[i] for c in columns] for i in range(count)]
    return [output] * count
