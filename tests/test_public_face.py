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


def test_incview_dagster_uses_only_the_face():
    """incview_dagster imports ``engine`` and its face, never its postgres/spark/sql internals."""
    import ast
    from pathlib import Path

    import engine

    package = Path(__file__).resolve().parent.parent / "incview_dagster"
    reached_in = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine."):
                reached_in.append(f"{path.name}: from {node.module} import ...")
            if isinstance(node, ast.Import):
                reached_in += [
                    f"{path.name}: import {a.name}"
                    for a in node.names
                    if a.name.startswith("engine.")
                ]
            if isinstance(node, ast.ImportFrom) and node.module == "engine":
                missing = [a.name for a in node.names if a.name not in engine.__all__]
                assert not missing, f"{path.name} imports {missing} from engine: not in the face"
    assert not reached_in, reached_in


def test_the_face_names_resolve():
    import engine

    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
    assert engine.lsn_text(0x16B3748) == "0/16B3748"
