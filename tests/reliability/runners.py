"""Running a fault test on both runners: ``@pytest.mark.parametrize("runner", RUNNERS)``.

The Spark case is slow (marked) and uses the test session's one SparkSession, which
``use_runner`` requests only when the test runs on Spark.
"""

from __future__ import annotations

import pytest

RUNNERS = ["local", pytest.param("spark", marks=pytest.mark.slow)]


def use_runner(request: pytest.FixtureRequest, runner: str) -> str:
    """``runner``, with the session's SparkSession started first when it is ``spark``."""
    if runner == "spark":
        request.getfixturevalue("spark")
    return runner
