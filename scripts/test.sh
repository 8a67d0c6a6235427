#!/usr/bin/env bash
# Creates/updates .venv with the project and its dev tools, checks lint/format, runs the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
# The browser test (tests/dagster/test_dagster_ui.py) drives the system's Chromium; as root on
# Debian it is installed here, elsewhere (or if that fails) the test skips and says why.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium for the browser test (log: .venv/apt.log)"
    if ! { apt-get update && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends chromium; } > .venv/apt.log 2>&1; then
        echo "could not install chromium (.venv/apt.log): the browser test will be skipped"
    fi
fi
ruff check .
ruff format --check .
# Two workers (the machine's cores; INCVIEW_TEST_WORKERS overrides, 0: none); every Spark test on
# one of them (tests/conftest.py groups them), the rest spread over both.
python -m pytest -n "${INCVIEW_TEST_WORKERS:-2}" --dist loadgroup "$@"
