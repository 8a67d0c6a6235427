#!/usr/bin/env bash
# Creates/updates .venv with the project and its dev tools, checks lint/format, runs the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
ruff check .
ruff format --check .
python -m pytest "$@"
