"""Where a result's figures are logged: Weights & Biases, MLflow, TensorBoard.

One small interface (`Sink`: `log_metrics(metrics, step)`, `log_artifact(path)`, `close()`)
with an adapter for each, every library imported only when its sink is opened and none a
dependency of lightspeed. The figures of a result come from its JSON object as written
(`result_metrics`), so what a logger shows is what the report says:

- a profile: `step_time_s`, `fraction_of_sol`, `mfu`, `peak_memory_bytes`, `bound`;
- a trace (this process's rank, the first): `step_time_s` (the median step),
  `steps_recorded`, `bound` (of most steps), and where they apply `device_busy_fraction`,
  `fraction_of_sol` (of the matrix products), `flops_per_step` (the median step's
  matrix-product FLOPs, from the shapes the trace recorded; on a CPU's trace too),
  `flops_per_s` (those of all the recorded steps over their time, as Lightning's
  ThroughputMonitor takes its window) and `mfu` (`flops_per_s` over the catalog GPU's
  peak at their main precision);
- a bench run: a profile's figures for each workload, under its name.

Every key starts with `lightspeed/`. Where each writes, under `directory`: W&B an
offline run in `directory/wandb/` (unless `WANDB_MODE` says otherwise; `WANDB_PROJECT`,
default "lightspeed"), MLflow a run in the file store `directory/mlruns/` (unless
`MLFLOW_TRACKING_URI` names another store), TensorBoard event files in
`directory/tensorboard/`.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import shutil
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from lightspeed.errors import ConfigError

PREFIX = "lightspeed/"
SINKS = ("wandb", "mlflow", "tensorboard")
# The package each sink needs, as pip installs it.
_PACKAGES = {"wandb": "wandb", "mlflow": "mlflow", "tensorboard": "tensorboard"}


class Sink(Protocol):
    """A logger's run: figures at a step, files as artifacts, then closed."""

    name: str

    def log_metrics(self, metrics: Mapping[str, float | str], step: int) -> None:
        """Log `metrics` at `step`; a string (a bound) as the logger keeps text."""

    def log_artifact(self, path: Path) -> None:
        """Keep a copy of the file `path` with the run."""

    def close(self) -> None:
        """End the run, its files written."""


def sink_names(names: str) -> list[str]:
    """The sinks `names` lists ("wandb", "mlflow", "tensorboard", comma-separated), each
    once; an unknown name, or one whose library is not installed, is a ConfigError that
    says what to give or install (checked without importing it)."""
    wanted = list(dict.fromkeys(n.strip().lower() for n in names.split(",") if n.strip()))
    if not wanted or any(n not in SINKS for n in wanted):
        raise ConfigError(
            f"--log {names}: not a logger lightspeed writes to; choose from {', '.join(SINKS)}"
            " (comma-separated for several)."
        )
    for name in wanted:
        if importlib.util.find_spec(name) is None:
            raise ConfigError(
                f"--log {name}: the {name} package is not installed; pip install"
                f" {_PACKAGES[name]} (or lightspeed[sinks])."
            )
    return wanted


def open_sinks(names: str, directory: str | Path, run_name: str | None = None) -> list[Sink]:
    """The sinks `names` lists (`sink_names`), each writing under `directory` (see the
    module docstring)."""
    wanted = sink_names(names)
    root = Path(directory)
    opened: list[Sink] = []
    try:
        for name in wanted:
            opened.append(_OPENERS[name](root, run_name))
    except ImportError as exc:  # installed, yet broken: a dependency of its own
        for sink in opened:
            sink.close()
        raise ConfigError(f"--log {name}: {name} cannot be imported: {exc}.") from None
    return opened


def log_result(
    sinks: Sequence[Sink], result: Mapping[str, Any], artifacts: Iterable[Path], step: int = 0
) -> dict[str, float | str]:
    """Log `result`'s figures (`result_metrics`) at `step` and the files `artifacts` to
    every sink; the figures logged."""
    metrics = result_metrics(result)
    files = list(artifacts)
    for sink in sinks:
        sink.log_metrics(metrics, step)
        for path in files:
            sink.log_artifact(path)
    return metrics


def result_metrics(result: Mapping[str, Any]) -> dict[str, float | str]:
    """The figures to log of a result's JSON object (a profile, a trace analysis or a
    bench run; another kind has none), each key under `PREFIX`."""
    kind = result.get("document")
    if kind == "profile":
        figures = _profile_figures(result)
    elif kind == "trace-analysis":
        figures = _trace_figures(result)
    elif kind == "bench":
        figures = {
            f"{r['workload']['name']}/{key}": value
            for r in result.get("results", [])
            for key, value in _profile_figures(r).items()
        }
    else:
        figures = {}
    return {PREFIX + key: value for key, value in figures.items()}


def _profile_figures(result: Mapping[str, Any]) -> dict[str, float | str]:
    totals = result.get("totals") or {}
    memory = result.get("memory") or {}
    figures: dict[str, float | str] = {}
    for key, value in (
        ("step_time_s", totals.get("step_time_s")),
        ("fraction_of_sol", totals.get("efficiency")),
        ("mfu", totals.get("mfu")),
        ("peak_memory_bytes", memory.get("peak_bytes")),
    ):
        if isinstance(value, (int, float)):
            figures[key] = float(value)
    if result.get("bound"):
        figures["bound"] = str(result["bound"])
    return figures


def _trace_figures(result: Mapping[str, Any]) -> dict[str, float | str]:
    ranks = result.get("ranks") or []
    if not ranks:
        return {}
    rank = ranks[0]
    # One pass over the steps, keeping three figures of each: a long trace's steps are
    # read from its file one at a time (`read_json.OnDisk`).
    steps = [
        (s["step_s"], s["bound"], (s.get("matmuls") or {}).get("flops"))
        for s in rank.get("steps") or []
    ]
    times = [t for t, _, _ in steps] or [rank["step_s"]]
    bounds = [b for _, b, _ in steps] or [rank["bound"]]
    figures: dict[str, float | str] = {
        "step_time_s": statistics.median(times),
        "steps_recorded": float(len(steps)),
        "bound": collections.Counter(bounds).most_common(1)[0][0],
    }
    temporal = rank.get("temporal_breakdown") or {}
    if temporal.get("total_s"):
        figures["device_busy_fraction"] = 1 - temporal["idle_s"] / temporal["total_s"]
    matmuls = rank.get("matmuls") or {}
    if matmuls.get("fraction_of_sol") is not None:
        figures["fraction_of_sol"] = matmuls["fraction_of_sol"]
    if any(flops is not None for _, _, flops in steps):
        each = [flops or 0.0 for _, _, flops in steps]
        flops = statistics.median(each)
        figures["flops_per_step"] = flops
        rate = sum(each) / sum(times)
        figures["flops_per_s"] = rate
        peak = _peak(matmuls)
        if peak:
            figures["mfu"] = rate / peak
    return figures


def _peak(matmuls: Mapping[str, Any]) -> float | None:
    """The datasheet peak (FLOP/s) of the GPU the products ran on, at the precision most
    of their time was in (TF32 for fp32 products that ran faster than fp32 allows);
    None without a catalog GPU."""
    by_precision = matmuls.get("by_precision") or {}
    peaks = (matmuls.get("hardware_ceilings") or {}).get("peak_flops_per_s") or {}
    if not by_precision or not peaks:
        return None
    precision = max(by_precision, key=lambda p: by_precision[p])
    if precision == "fp32" and matmuls.get("tf32_ops"):
        precision = "tf32"
    peak = peaks.get(precision)
    return float(peak) if peak else None


def numbers(metrics: Mapping[str, float | str]) -> dict[str, float]:
    """The numeric figures of `metrics` (what a logger of scalars takes; not the bound)."""
    return {k: float(v) for k, v in metrics.items() if not isinstance(v, str)}


def _texts(metrics: Mapping[str, float | str]) -> dict[str, str]:
    return {k: v for k, v in metrics.items() if isinstance(v, str)}


class WandbSink:
    """A W&B run, offline unless `WANDB_MODE` says otherwise."""

    name = "wandb"

    def __init__(self, directory: Path, run_name: str | None) -> None:
        import wandb

        (directory / "wandb").mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "lightspeed"),
            name=run_name,
            dir=str(directory),
            mode=os.environ.get("WANDB_MODE", "offline"),  # type: ignore[arg-type]
            # A run of its own beside any the user has open (wandb 0.19.10 and later).
            reinit="create_new",
            # lightspeed says "logged to wandb"; wandb's own lines stay in its debug log.
            settings=wandb.Settings(silent=True),
        )

    def log_metrics(self, metrics: Mapping[str, float | str], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_artifact(self, path: Path) -> None:
        # A file in the run's folder is one of its files (uploaded when it syncs).
        shutil.copy(path, Path(self.run.dir) / path.name)

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    """An MLflow run in the local file store under the directory, unless
    `MLFLOW_TRACKING_URI` names a store."""

    name = "mlflow"

    def __init__(self, directory: Path, run_name: str | None) -> None:
        import mlflow

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (directory / "mlruns").resolve().as_uri()
            # MLflow 3 keeps the file store but asks for consent to use it.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = mlflow.tracking.MlflowClient(uri)
        experiment = self.client.get_experiment_by_name("lightspeed")
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment("lightspeed")
        )
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id

    def log_metrics(self, metrics: Mapping[str, float | str], step: int) -> None:
        for key, value in numbers(metrics).items():
            self.client.log_metric(self.run_id, key, value, step=step)
        for key, text in _texts(metrics).items():
            self.client.set_tag(self.run_id, key, text)

    def log_artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TensorBoardSink:
    """TensorBoard event files (`torch.utils.tensorboard`): scalars, and text for the
    bound; an artifact is copied beside the events."""

    name = "tensorboard"

    def __init__(self, directory: Path, run_name: str | None) -> None:
        import tensorboard  # noqa: F401  (torch's writer needs it; say so if missing)
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = directory / "tensorboard" / (run_name or "lightspeed")
        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def log_metrics(self, metrics: Mapping[str, float | str], step: int) -> None:
        for key, value in numbers(metrics).items():
            self.writer.add_scalar(key, value, step)
        for key, text in _texts(metrics).items():
            self.writer.add_text(key, text, step)
        self.writer.flush()

    def log_artifact(self, path: Path) -> None:
        shutil.copy(path, self.log_dir / path.name)

    def close(self) -> None:
        self.writer.close()


_OPENERS: dict[str, Callable[[Path, str | None], Sink]] = {
    "wandb": WandbSink,
    "mlflow": MlflowSink,
    "tensorboard": TensorBoardSink,
}
