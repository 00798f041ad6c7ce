#!/usr/bin/env bash
# Create .venv (if missing) and install deltachip with its test extras into it.
# torch is pinned to 2.13.x: on the project's machines pip picks the local CPU wheel; elsewhere
# pip takes PyPI's build (set PIP_INDEX_URL to a CPU index to avoid a CUDA download).
# pip's output goes to .venv/install.log and is shown only if the install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
log=.venv/install.log
if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e '.[test]'; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "setup: pip install failed (full log: $log)" >&2
  exit 1
fi
.venv/bin/python -c "import deltachip, torch, transformers"
