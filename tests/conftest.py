"""Shared fixtures: a fresh state directory per test."""

from __future__ import annotations

import pytest


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"
