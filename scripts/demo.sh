#!/usr/bin/env bash
# Creates/updates .venv with the project, then runs the demo (`incview demo`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
incview demo "$@"
