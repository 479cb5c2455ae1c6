"""Download the wheels a lent CUDA machine lacks for `benchmarks/gpu_run.py`, at the
versions this checkout's virtual environment has, into `.whl/` (which git ignores).

    .venv/bin/python benchmarks/gpu_wheels.py            # here, before the device call

The machine's image has torch, numpy, rich, pytest and hypothesis, but not lightspeed's
other runtime dependencies; typer from 0.24 on also needs pydantic, which it lacks too
(a first run there failed on that). Then, on the machine, before the script:

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site

The wheels are for CPython 3.12 on manylinux x86-64, the image's Python.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What lightspeed imports at run time beyond the image's packages, and what those need.
PACKAGES = (
    "orjson",
    "msgspec",
    "plotly",
    "typer",
    "click",
    "rich",
    "pydantic",
    "pydantic_core",
    "annotated-types",
    "typing-inspection",
    "typing_extensions",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def pinned(names: tuple[str, ...]) -> list[str]:
    """`NAME==VERSION` for each of `names`, at the version installed here."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=ROOT / ".whl")
    args = parser.parse_args()
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.12", "--implementation", "cp",
        *(f"--platform={p}" for p in PLATFORMS),
        "-d", str(args.dest), *pinned(PACKAGES),
    ]  # fmt: skip
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
