"""Settings for the whole suite.

Hypothesis: the default run is derandomized (the same examples every run, so a failure is
reproducible and a green run is not luck); the slow run (``-m slow``) draws fresh examples.
``DELTACHIP_HYPOTHESIS=default|random`` overrides the choice.
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", derandomize=True)
settings.register_profile("random", derandomize=False)


def pytest_configure(config) -> None:
    mark = config.getoption("markexpr", "") or ""
    slow = "slow" in mark and "not slow" not in mark
    settings.load_profile(os.environ.get("DELTACHIP_HYPOTHESIS") or ("random" if slow else "default"))
