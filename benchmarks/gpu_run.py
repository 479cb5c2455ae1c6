"""The checks and captures a CUDA machine is lent for, in one run under one deadline.

    .venv/bin/python benchmarks/gpu_wheels.py          # here: what the machine lacks
    # there (the device tool's run, carrying .whl), all in one command:
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 benchmarks/gpu_run.py --out "$OUT" --deadline 450
    PYTHONPATH=src python benchmarks/gpu_run.py --out /tmp/dry --dry-run   # on a CPU

In order, each step in its own process under its own timeout (and never past the
deadline), its files packed as soon as it ends, so whatever a killed run finished comes
back:

1. `env`: the GPU, driver, torch and CUDA versions (`nvidia-smi`, torch);
2. `tests`: `pytest -m cuda` (junit XML and its log);
3. `capture`: GPT-2 small, BERT-base and ResNet-50 in bf16 then fp32, each one process
   of `benchmarks/gpu_capture.py` (profile, trace, allocator peak);
4. `whatif`: `benchmarks/gpu_whatif.py`, traces of steps beside the same steps changed
   (the optimizer's kind, CUDA graphs), each variant measured;
5. `bppsa`: `benchmarks/bppsa.py --device cuda`, an RNN's backward as a scan against
   cuDNN's, measured and predicted (its figures in its log);
6. `checkpoint-ops`: `benchmarks/checkpoint_ops.py --device cuda`, the checkpoint plans
   with and without op-level recomputation, peaks predicted and measured;
7. `mincut`: `benchmarks/recompute_vs_compile.py --device cuda`, per model: the min-cut
   partitioner's memory budgets and the op-level policies (op by op, and with products
   recomputed too), all compiled by Inductor, timed in turns, with each step's allocator
   peak; then `table`, the transformer encoder's kept bytes and recomputed FLOPs of the
   same variants on the GPU;
8. `calibrate`: `lightspeed hw calibrate --device cuda --json` (matmul peaks in bf16,
   fp16, TF32 and fp32; memory bandwidth);
9. `ddp`: `benchmarks/predict_data_parallel.py`, 2 processes over gloo on the CPU,
   measured against its prediction;
10. `cpu`: `lightspeed profile NAME --quick` of the same workloads on the machine's CPU.

`--only` keeps the steps whose names start with one of its words, in this order.

At most 8 files come back from a lent machine, so `--out` receives `base.tar.gz`
(environment, tests, calibration, every step's log and `steps.json`: each step's exit
status, seconds and whether it timed out), one `capture-DTYPE.tar` per precision,
`whatif.tar`, and `cpu.tar.gz` (DDP and CPU profiles). `--dry-run` runs the same plan on
the CPU with the tiny workloads, no calibration and one round of nothing slow: what
`make test` runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

WORKLOADS = ("gpt2-small", "bert-base", "resnet50")
DRY_WORKLOADS = ("mlp-tiny",)
CPU_ORDER = {"resnet50": 0, "bert-base": 1, "gpt2-small": 2}
# The memory budgets `mincut` times beside the op-level policy, per model: the least
# memory with nothing recomputed (0.8), and budgets that recompute attention; and the
# op-level plans with products recomputed too (`ops+K`) it times beside them.
MINCUT_BUDGETS = {"transformer-encoder": "0.8,0.5,0.3", "gpt2-small": "0.8,0.5"}
MINCUT_DEEPER = {
    "transformer-encoder": (
        "ops+1:encoder.layers.[0-2],ops:encoder.layers.[3-5]",
        "ops+1:encoder.layers.[0-3],ops:encoder.layers.[45]",
        "ops+1",
        "ops+2:encoder.layers.[01],ops+1:encoder.layers.[2-5]",
    ),
    "gpt2-small": ("ops+1", "ops+2"),
}
CUDA_TEST_FILES = (
    "tests/test_cuda.py",
    "tests/measure/test_memory.py",
    "tests/measure/test_op_times.py",
    "tests/optimize/test_scan_backward.py",
)


@dataclasses.dataclass(frozen=True)
class Step:
    """One command of the plan: its name, argv, timeout (s) and the archive it lands in."""

    name: str
    argv: list[str]
    timeout_s: float
    archive: str


@dataclasses.dataclass
class Outcome:
    """How a step ended: exit status (None when killed), seconds, and whether it timed out."""

    name: str
    returncode: int | None
    seconds: float
    timed_out: bool
    skipped: bool = False


def plan(work: Path, *, dry_run: bool) -> list[Step]:
    """The steps, in order; `dry_run` puts every capture on the CPU and keeps it small."""
    py = sys.executable
    lightspeed = [py, "-m", "lightspeed"]
    device = "cpu" if dry_run else "cuda"
    workloads = DRY_WORKLOADS if dry_run else WORKLOADS
    dtypes = ("fp32",) if dry_run else ("bf16", "fp32")
    steps = [
        Step("env", [py, str(HERE / "gpu_run.py"), "--env", str(work / "env.json")], 60, "base"),
        Step(
            "tests",
            [
                py, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider",
                f"--junitxml={work / 'tests.xml'}",
                *(["--collect-only"] if dry_run else []),
                *CUDA_TEST_FILES,
            ],
            150,
            "base",
        ),
    ]  # fmt: skip
    for dtype in dtypes:
        for name in workloads:
            steps.append(
                Step(
                    f"capture-{name}-{dtype}",
                    [py, str(HERE / "gpu_capture.py"), name, dtype, "--device", device,
                     "--out", str(work / f"capture-{dtype}" / name)],
                    120,
                    f"capture-{dtype}",
                )
            )  # fmt: skip
    steps.append(
        Step(
            "whatif",
            [py, str(HERE / "gpu_whatif.py"), "--out", str(work / "whatif"),
             *(["--dry-run", "--rounds", "1", "--steps", "2"] if dry_run else [])],
            200,
            "whatif",
        )
    )  # fmt: skip
    if not dry_run:
        steps += [
            Step(
                "bppsa",
                [py, str(HERE / "bppsa.py"), "--device", "cuda", "--rounds", "5",
                 "--budget", "0.5"],
                120,
                "base",
            ),
            Step(
                "checkpoint-ops",
                [py, str(HERE / "checkpoint_ops.py"), "--device", "cuda", "--rounds", "3",
                 "--budget", "0.5"],
                150,
                "base",
            ),
            *(
                Step(
                    f"mincut-{model}",
                    [py, str(HERE / "recompute_vs_compile.py"), "--device", "cuda",
                     "--models", model, "--no-table", "--interleave", "--budgets", budgets,
                     "--rounds", "20", "--ops", *MINCUT_DEEPER[model]],
                    300,
                    "base",
                )
                for model, budgets in MINCUT_BUDGETS.items()
            ),
            Step(
                "table-transformer-encoder",
                [py, str(HERE / "recompute_vs_compile.py"), "--device", "cuda",
                 "--models", "transformer-encoder", "--table-budgets",
                 MINCUT_BUDGETS["transformer-encoder"],
                 "--ops", *MINCUT_DEEPER["transformer-encoder"]],
                200,
                "base",
            ),
            Step(
                "calibrate",
                [*lightspeed, "hw", "calibrate", "--device", "cuda", "--force",
                 "--json", str(work / "calibrate-cuda.json")],
                150,
                "base",
            ),
        ]  # fmt: skip
    if not dry_run:
        steps.append(
            Step(
                "ddp",
                [py, str(HERE / "predict_data_parallel.py"), "--rounds", "1", "--budget", "0.5",
                 "--quiet-wait", "2"],
                200,
                "cpu",
            )
        )  # fmt: skip
    # The CPU's profiles last, the quickest first: GPT-2 small's did not finish in 108 s
    # on 16 cores.
    for name in sorted(workloads, key=lambda n: CPU_ORDER.get(n, 0)):
        steps.append(
            Step(
                f"cpu-{name}",
                [*lightspeed, "profile", name, "--device", "cpu", "--quick",
                 "--json", str(work / "cpu" / f"{name}-fp32-cpu.profile.json")],
                120,
                "cpu",
            )
        )  # fmt: skip
    return steps


def run_step(step: Step, work: Path, timeout_s: float) -> Outcome:
    """Run one step in its own process group, output to `work/logs/NAME.log`; a step
    past its timeout is killed with every process it started (torchrun's too)."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (work / "cpu").mkdir(exist_ok=True)
    start = time.perf_counter()
    with (logs / f"{step.name}.log").open("w") as log:
        log.write("$ " + " ".join(step.argv) + "\n")
        log.flush()
        proc = subprocess.Popen(
            step.argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code, timed_out = None, True
    return Outcome(step.name, code, round(time.perf_counter() - start, 2), timed_out)


def pack(work: Path, out: Path, archive: str) -> None:
    """Write `out/ARCHIVE.tar[.gz]` afresh from what the steps landing in it wrote."""
    gz = archive in ("base", "cpu")
    target = out / (f"{archive}.tar.gz" if gz else f"{archive}.tar")
    partial = target.with_name(target.name + ".part")
    with tarfile.open(partial, "w:gz" if gz else "w") as tar:
        if archive == "base":
            for name in ("env.json", "tests.xml", "calibrate-cuda.json", "steps.json", "logs"):
                if (work / name).exists():
                    tar.add(work / name, arcname=name)
        elif archive == "cpu":
            if (work / "cpu").exists():
                tar.add(work / "cpu", arcname="cpu")
        elif (work / archive).exists():
            tar.add(work / archive, arcname=archive)
    partial.replace(target)


def environment(path: Path) -> None:
    """The machine's GPU, driver and software versions, as JSON at `path`."""
    import platform

    import torch

    env: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_count": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(
            device_name=torch.cuda.get_device_name(),
            multiprocessors=props.multi_processor_count,
            memory_bytes=props.total_memory,
        )
        query = "driver_version,clocks.max.sm,clocks.max.mem,power.limit"
        smi = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        env["nvidia_smi"] = dict(
            zip(query.split(","), smi.stdout.strip().split(", "), strict=False)
        )
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        env["cpu_model"] = model
    except (OSError, StopIteration):
        pass
    path.write_text(json.dumps(env, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the archives go ($OUT on a lent machine)")
    parser.add_argument("--work", type=Path, help="scratch folder (default: OUT/../gpu_run_work)")
    parser.add_argument("--deadline", type=float, default=480.0, help="seconds for all steps")
    parser.add_argument("--dry-run", action="store_true", help="the plan on the CPU, small")
    parser.add_argument("--only", nargs="*", help="run only the steps whose names start so")
    parser.add_argument("--env", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.env is not None:
        environment(args.env)
        return 0
    if args.out is None:
        parser.error("--out is required")
    out: Path = args.out.resolve()
    work: Path = (args.work or out.parent / "gpu_run_work").resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    # The run's caches (the calibration above all) stay inside what is packed.
    os.environ.setdefault("LIGHTSPEED_CACHE_DIR", str(work / "cache"))
    # A GPU settles within a few steps; waiting up to the default 15 s a profile would
    # spend a lent machine's minutes.
    os.environ.setdefault("LIGHTSPEED_MAX_SETTLE_S", "3")
    os.environ["PYTHONUNBUFFERED"] = "1"
    paths = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    steps = plan(work, dry_run=args.dry_run)
    if args.only:
        steps = [s for s in steps if any(s.name.startswith(p) for p in args.only)]
    outcomes: list[Outcome] = []
    begin = time.perf_counter()
    for step in steps:
        left = args.deadline - (time.perf_counter() - begin)
        if left < 5:
            outcomes.append(Outcome(step.name, None, 0.0, False, skipped=True))
            print(f"{step.name}: skipped, the deadline has passed", flush=True)
        else:
            outcome = run_step(step, work, min(step.timeout_s, left))
            outcomes.append(outcome)
            status = "timed out" if outcome.timed_out else f"exit {outcome.returncode}"
            print(f"{step.name}: {status} in {outcome.seconds:.1f} s", flush=True)
        (work / "steps.json").write_text(
            json.dumps([dataclasses.asdict(o) for o in outcomes], indent=1) + "\n"
        )
        # Every step's log and outcome are in the base archive; its files in its own.
        for archive in dict.fromkeys((step.archive, "base")):
            pack(work, out, archive)
    failed = [o.name for o in outcomes if o.returncode != 0]
    print(f"done in {time.perf_counter() - begin:.0f} s; not ok: {', '.join(failed) or 'none'}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
