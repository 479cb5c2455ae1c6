#!/usr/bin/env bash
# Creates benchmarks/litserve/.venv: torch 2.13.0 (the CPU wheel the repository's
# constraints pin), lightspeed itself (editable) and LitServe (requirements.txt).
# Idempotent: does nothing when the venv exists and its imports work.
#
#   benchmarks/litserve/setup.sh            # then: benchmarks/litserve/.venv/bin/python app.py ...
#   FORCE=1 benchmarks/litserve/setup.sh    # rebuild the venv from scratch
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
constraints="$root/constraints.txt"
check='import torch, litserve, lightspeed.workload.targets; assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__'

if [[ "${FORCE:-0}" == "1" && -d "$venv" ]]; then
    rm -rf "$venv"
fi
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "setup.sh: $venv is ready (torch, litserve, lightspeed import); nothing to do."
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet -c "$constraints")
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" -e "$root"
"${pip[@]}" -r "$here/requirements.txt"
"$venv/bin/python" -c "$check"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
print("setup.sh: ready:", ", ".join(f"{p} {md.version(p)}" for p in ("torch", "litserve", "lightspeed", "fastapi", "uvicorn")))
PY
