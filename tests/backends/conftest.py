"""Fixtures shared by the backend tests."""
from __future__ import annotations

from pathlib import Path

import pytest

import deltachip
from tests.backends.circuits import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """``compiled(name, dtype)``: example ``name`` of :data:`EXAMPLES` compiled for the compact
    target in ``dtype``, once per module."""
    made: dict[tuple[str, str], Path] = {}

    def get(name: str, dtype: str) -> Path:
        if (name, dtype) not in made:
            d = tmp_path_factory.mktemp(f"{name}-{dtype}") / "chip"
            chip = deltachip.compile(deltachip.load(ROOT / EXAMPLES[name][0]), target="compact",
                                     dtype=dtype)
            chip.save(d)
            made[name, dtype] = d
        return made[name, dtype]
    return get
