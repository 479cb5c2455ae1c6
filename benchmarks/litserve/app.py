"""A lightspeed target served by LitServe (Lightning AI) with LitServe's own batcher:
the baseline `lightspeed serve` is compared against. Runs in benchmarks/litserve/.venv
(setup.sh), never in lightspeed's own environment.

    .venv/bin/python app.py resnet18-tiny --max-batch-size 8 --batch-timeout 0.005 --port 8000
    .venv/bin/python app.py resnet18-tiny --print-request      # one request body, JSON

TARGET is what `lightspeed serve-profile` takes (a suite name, `path/file.py:NAME`,
`hf:…`), loaded with lightspeed's own loader. The protocol is lightspeed's server's, so
one load generator drives both:

- `POST /predict`, JSON `{"inputs": X}`: one sample, X a nested list shaped as the
  workload's `batch(1)` inputs, with or without the leading batch dimension of 1. Also
  taken, and needed where the model takes several inputs: an object of them by the
  batch's key (a dict batch) or position ("0", "1", … of a tuple batch); for a workload
  with its own forward, the inputs are the batch's tensors its output depends on.
- The answer: `{"outputs": Y, "batch_size": n}`, Y that sample's row of the output (a
  nested list, or the lists and objects the model returned them in), n the batch it ran
  in.
- `GET /health`: 200 "ok" once the inference worker has built the model, else 503.

LitServe 0.2.19 starts, besides this process (which then only waits, with a thread
that watches the workers): a multiprocessing Manager process holding its request and
response queues (forked), multiprocessing's resource tracker, one inference process per
`--workers` (spawned; it builds the model and runs LitServe's batcher, polling the
request queue every millisecond while a batch window is open) and one uvicorn API-server
process per `--api-servers` (forked). LitServe itself shuts down on KeyboardInterrupt
only: a SIGTERM to its main process would leave the others running. Here SIGTERM or
SIGINT shuts them all down, and anything left is then terminated.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import litserve as ls


def _served(workload: Any, device: str = "cpu") -> tuple[Any, Any, list[Any]]:
    """lightspeed's own engine for the workload (the model in eval, its inference call,
    its batches) and where a request's inputs go in the workload's batch: the same
    tensors lightspeed's server reads from a request."""
    from lightspeed.facts.device import Device
    from lightspeed.serving.engine import Engine
    from lightspeed.workload.inference import forward_of

    engine = Engine(workload, Device.parse(device))
    return engine, forward_of(workload), [leaf.key for leaf in engine.schema.leaves]


def _get(batch: Any, key: Any) -> Any:
    return batch if key is None else batch[key]


def _replace(batch: Any, key: Any, tensor: Any) -> Any:
    if key is None:
        return tensor
    if isinstance(batch, Mapping):
        return {**batch, key: tensor}
    items = list(batch)
    items[key] = tensor
    return tuple(items) if isinstance(batch, tuple) else items


def _rows(output: Any, n: int) -> list[Any]:
    """`output` split into each of the `n` samples' parts as nested lists; what does not
    lead with the batch dimension is given whole to every sample."""
    import torch

    if isinstance(output, torch.Tensor):
        if output.dim() >= 1 and output.shape[0] == n:
            return [row.tolist() for row in output.detach().float().cpu()]
        return [output.detach().float().cpu().tolist()] * n
    if isinstance(output, Mapping):
        parts = {k: _rows(v, n) for k, v in output.items() if v is not None}
        return [{k: rows[i] for k, rows in parts.items()} for i in range(n)]
    if isinstance(output, (tuple, list)):
        parts_list = [_rows(v, n) for v in output]
        return [[rows[i] for rows in parts_list] for i in range(n)]
    return [output] * n


class LightspeedAPI(ls.LitAPI):
    """The workload's model: decode one request into its sample tensors, stack a batch
    into the workload's own batch (labels from its `batch(n)`), run the workload's
    inference call, split the output by sample."""

    def __init__(self, target: str, threads: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.threads = threads

    def setup(self, device: str) -> None:
        import torch

        from lightspeed.workload.targets import load_target

        torch.set_num_threads(self.threads)
        self.device_name = device
        self.engine, self.forward, self.keys = _served(load_target(self.target), device)
        self.model = self.engine.model
        one = self.engine.template(1)
        self.shapes = {k: tuple(_get(one, k).shape[1:]) for k in self.keys}
        self.dtypes = {k: _get(one, k).dtype for k in self.keys}
        with torch.inference_mode():  # warm up: the first call pays for allocations
            self.forward(self.model, one)

    # No annotations on decode_request's `request` or encode_response's return: LitServe
    # reads them as the endpoint's FastAPI request and response types.
    def decode_request(self, request, **kwargs):  # type: ignore[no-untyped-def]
        import torch
        from fastapi import HTTPException

        if not isinstance(request, dict) or "inputs" not in request:
            raise HTTPException(400, 'the JSON body must be an object {"inputs": ...}.')
        given = request["inputs"]
        names = {str(k): k for k in self.keys}
        if len(self.keys) == 1 and not isinstance(given, dict):
            given = {self.keys[0]: given}  # one input: a bare nested list
        elif isinstance(given, dict) and set(given) == set(names):
            given = {names[name]: value for name, value in given.items()}
        else:
            raise HTTPException(
                422, f'"inputs" must be an object of the model\'s inputs {sorted(names)}.'
            )
        sample = {}
        for key, value in given.items():
            try:
                tensor = torch.tensor(value, dtype=self.dtypes[key])
            except (TypeError, ValueError, RuntimeError) as exc:
                raise HTTPException(422, f"input {key!r} is not an array of numbers.") from exc
            shape = self.shapes[key]
            if tuple(tensor.shape) not in (shape, (1, *shape)):
                raise HTTPException(
                    422, f"input {key!r} has shape {list(tensor.shape)}, not {list(shape)}."
                )
            sample[key] = tensor.reshape(shape)
        return sample

    def batch(self, inputs: list[dict[Any, Any]]) -> Any:
        import torch

        batch = self.engine.template(len(inputs))
        for key in self.keys:
            stacked = torch.stack([sample[key] for sample in inputs]).to(self.device_name)
            batch = _replace(batch, key, stacked)
        return batch

    def predict(self, x: Any, **kwargs: Any) -> list[Any]:
        import torch

        n = _get(x, self.keys[0]).shape[0]
        with torch.inference_mode():
            output = self.forward(self.model, x)
        return [(row, n) for row in _rows(output, n)]

    def unbatch(self, output: list[Any]) -> list[Any]:
        return output

    def encode_response(self, output, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(output, tuple) and len(output) == 2:  # batched: (row, batch size)
            return {"outputs": output[0], "batch_size": output[1]}
        return {"outputs": output, "batch_size": 1}


class UnbatchedAPI(LightspeedAPI):
    """`--max-batch-size 1`: LitServe's single loop calls predict on one decoded
    request, without batch() or unbatch()."""

    def predict(self, x: Any, **kwargs: Any) -> Any:
        return super().predict(self.batch([x]))[0]


def request_body(target: str) -> str:
    """A valid request: the inputs of the workload's `batch(1)`, as JSON; a bare nested
    list where the model takes one input."""
    from lightspeed.workload.targets import load_target

    engine, _, keys = _served(load_target(target))
    one = engine.template(1)
    if len(keys) == 1:
        return json.dumps({"inputs": _get(one, keys[0]).tolist()})
    return json.dumps({"inputs": {str(k): _get(one, k).tolist() for k in keys}})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="a lightspeed target: suite name or path/file.py:NAME")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--batch-timeout", type=float, default=0.005, metavar="SECONDS")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "0.0.0.0", "::"])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--workers", type=int, default=1, help="inference processes")
    parser.add_argument(
        "--api-servers", type=int, default=1, help="uvicorn API-server processes (LitServe's)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="LitServe's request timeout, in seconds: a request that waited longer in its"
        " queue before a batch took it gets 504 (none once it runs); -1: no timeout",
    )
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--print-request", action="store_true", help="print one request body (JSON) and exit"
    )
    args = parser.parse_args(argv)
    if args.print_request:
        print(request_body(args.target))
        return
    if args.max_batch_size < 1:
        parser.error("--max-batch-size must be at least 1")

    warnings.filterwarnings("ignore", message="The LitServer has both batch and unbatch")
    cls = LightspeedAPI if args.max_batch_size > 1 else UnbatchedAPI
    api = cls(
        args.target,
        args.threads,
        max_batch_size=args.max_batch_size,
        batch_timeout=args.batch_timeout,
    )
    server = ls.LitServer(
        api,
        accelerator="cpu",
        workers_per_device=args.workers,
        timeout=False if args.timeout < 0 else args.timeout,
        disable_openapi_url=True,
    )

    # LitServe shuts down on KeyboardInterrupt only; SIGTERM would otherwise kill this
    # process alone and leave the Manager, inference and uvicorn processes running.
    # The forked uvicorn process inherits this handler and re-raises the signal it caught
    # once it has shut down: there, just exit.
    main_pid = os.getpid()

    def interrupt(signum: int, frame: Any) -> None:
        if os.getpid() != main_pid:
            raise SystemExit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        server.run(
            host=args.host,
            port=args.port,
            num_api_servers=args.api_servers,
            log_level=args.log_level,
            generate_client_file=False,  # it would write client.py into the cwd
            api_server_worker_type="process",
        )
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for child in multiprocessing.active_children():
            child.terminate()
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
    sys.exit(0)


if __name__ == "__main__":
    main()
