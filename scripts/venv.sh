# Sourced by scripts/test.sh and scripts/demo.sh: create or update .venv, then activate it.
# Reinstalls only when pyproject.toml changed since the last install; pip's log is shown on failure.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.incview-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing incview and its dependencies into .venv (log: .venv/pip.log)"
    if ! { .venv/bin/python -m pip install --upgrade pip &&
           .venv/bin/python -m pip install -e '.[dev]'; } > .venv/pip.log 2>&1; then
        cat .venv/pip.log
        echo "pip install failed (log above)" >&2
        exit 1
    fi
    echo "$want" > "$stamp"
fi
# shellcheck disable=SC1091
source .venv/bin/activate
