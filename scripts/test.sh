#!/usr/bin/env bash
# Set up .venv from scratch if needed, then run the default test suite (slow tests excluded)
# in two worker processes (pytest-xdist; each test file runs whole in one worker, so its
# module fixtures are built once; DELTACHIP_TEST_WORKERS=N to change, 0 for one process).
# Usage: bash scripts/test.sh [pytest args]     e.g. bash scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n "${DELTACHIP_TEST_WORKERS:-2}" --dist loadfile "$@"
