#!/usr/bin/env bash
# Set up .venv from scratch if needed, then run the default test suite (slow tests excluded).
# Usage: bash scripts/test.sh [pytest args]     e.g. bash scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
