"""The public face: what README and the architecture's contract import from ``engine``."""

from __future__ import annotations

import subprocess
import sys


def test_the_face_imports_what_the_contract_names():
    import engine
    from engine import Engine, IncviewError, UnsupportedSQL, ViewError, ViewStatus
    from engine.engine import Engine as Direct

    assert Engine is Direct
    assert issubclass(UnsupportedSQL, IncviewError) and issubclass(ViewError, IncviewError)
    assert set(engine.__all__) >= {"Engine", "ViewStatus", "IncviewError", "ViewError"}
    assert {"name", "phase", "lag_ms", "rows", "state_bytes", "last_error"} <= set(
        ViewStatus.__dataclass_fields__
    )


def test_a_fresh_interpreter_imports_engine_from_the_package():
    """No import cycle: ``from engine import Engine`` first thing in a new process."""
    out = subprocess.run(
        [sys.executable, "-c", "from engine import Engine, ViewStatus; print(Engine.__name__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "Engine"
