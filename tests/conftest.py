"""Settings for the whole suite.

Hypothesis: the default run is derandomized (the same examples every run, so a failure is
reproducible and a green run is not luck); the slow run (``-m slow``) draws fresh examples.
``DELTACHIP_HYPOTHESIS=default|random`` overrides the choice.

Threads: the suite may run in several worker processes (pytest-xdist, ``-n N``: the README's
test command runs two); each worker's torch and OpenMP get the cores divided among the
workers (at most 2 each), so workers never oversubscribe the machine (under load, two torch
threads a process made transformers 20x slower than one).
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", derandomize=True)
settings.register_profile("random", derandomize=False)


def _threads() -> int:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return max(1, min(2, (os.cpu_count() or 1) // workers))


os.environ.setdefault("OMP_NUM_THREADS", str(_threads()))     # before torch is imported


def pytest_configure(config) -> None:
    import torch
    torch.set_num_threads(_threads())
    mark = config.getoption("markexpr", "") or ""
    slow = "slow" in mark and "not slow" not in mark
    settings.load_profile(os.environ.get("DELTACHIP_HYPOTHESIS") or ("random" if slow else "default"))
