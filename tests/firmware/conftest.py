"""Shared fixtures for the firmware tests: cached builds and the two engines.

``firmware_elf(name, compiler="zig", opt="-O2")`` builds a shipped program (see
:func:`firmware.toolchain.shipped_programs`) or an ISA test (``isa:<stem>``) once per session.
``engine`` parametrises a test over unicorn and the golden emulator (helpers: fw_engines.py,
a module with a unique name, since other test folders have a ``conftest`` of their own).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest


from firmware import toolchain  # noqa: E402
from tests.firmware.fw_engines import ENGINES  # noqa: E402


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    """Each test using this runs on unicorn and on the golden emulator."""
    return request.param


@pytest.fixture(scope="session")
def firmware_elf(tmp_path_factory) -> Callable[..., Path]:
    """A session-cached builder: name → ELF path (zig's first build is slow)."""
    out_dir = tmp_path_factory.mktemp("firmware")
    cache: dict[tuple[str, str, str], Path] = {}
    programs = toolchain.shipped_programs()

    def get(name: str, compiler: str = "zig", opt: str = "-O2") -> Path:
        key = (name, compiler, opt)
        if key not in cache:
            if name.startswith("isa:"):
                sources = [toolchain.ISA_TESTS_DIR / f"{name[4:]}.S"]
            else:
                sources = programs[name]
            stem = name.replace(":", "_")
            out = out_dir / f"{stem}.{compiler}{opt}.elf"
            cache[key] = toolchain.build(sources, out, opt=opt, compiler=compiler)
        return cache[key]

    return get
