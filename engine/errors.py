"""Error classes of incview, one per kind of failure a user can act on.

Every message names the object at fault and, where there is one, the fix. Scalar evaluation
errors inside a running view are *not* exceptions: they travel as diffs in the view's errs
collection (see ``engine.dataflow.errs``).
"""

from __future__ import annotations


class IncviewError(Exception):
    """Base class of every error incview raises on purpose."""


class UnsupportedSQL(IncviewError):
    """The view's SQL uses a construct incview cannot maintain incrementally."""


class ViewError(IncviewError):
    """A view cannot be created, populated or maintained (unknown table, missing replica identity...)."""


class StateError(IncviewError):
    """A view's state directory is unusable (locked by another process, corrupt, wrong version)."""


class SourceChanged(ViewError):
    """A source table or column a view reads was dropped, renamed or changed type."""
