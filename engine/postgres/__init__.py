"""incview's PostgreSQL side: reading changes (``cdc``, ``pgoutput``, ``values``) and, in sibling
modules, population snapshots, the result-table sink and the incview catalog.

Import the submodule you need (``from engine.postgres.cdc import CdcReader``); this package
module re-exports nothing, so importing ``engine.postgres`` stays cheap and must not connect to
anything.
"""
