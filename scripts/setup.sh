#!/usr/bin/env bash
# Create .venv (if missing) and install deltachip with its test extras into it.
# torch is pinned to 2.13.x: on the project's machines pip picks the local CPU wheel; elsewhere
# pip takes PyPI's build (set PIP_INDEX_URL to a CPU index to avoid a CUDA download).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v -i warning || true
.venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v -i warning || true
.venv/bin/python -c "import deltachip, torch, transformers" 
