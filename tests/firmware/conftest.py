"""Shared fixtures for the firmware tests: cached builds and the two engines.

``firmware_elf(name, compiler="zig", opt="-O2")`` builds a shipped program (see
:func:`firmware.toolchain.shipped_programs`) or an ISA test (``isa:<stem>``) once per session.
``run_on(engine, elf, input_text=None)`` runs an ELF on ``"unicorn"`` (tests/firmware/
unicorn_runner.py) or ``"emulator"`` (the golden ISA emulator, :mod:`cpu.emulator`) and
returns an :class:`Outcome`.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from firmware import toolchain  # noqa: E402
from unicorn_runner import run_elf  # noqa: E402

ENGINES = ["unicorn", "emulator"]
MAX_STEPS = 50_000_000


@dataclass
class Outcome:
    """What an engine reports: exit code (None without exit), UART bytes, fault text
    (None after a clean exit), and instructions retired (None on unicorn)."""
    exit_code: int | None
    output: bytes
    fault: str | None
    instructions: int | None


def run_on(engine: str, elf: Path, input_text: str | None = None,
           max_steps: int = MAX_STEPS) -> Outcome:
    """Run ``elf`` on ``engine`` ("unicorn" or "emulator") with optional input text."""
    if engine == "unicorn":
        r = run_elf(elf, input_text, max_steps)
        return Outcome(r.exit_code, r.output, r.fault, None)
    from cpu.emulator import Machine
    m = Machine.from_elf(elf, None if input_text is None else input_text.encode())
    r = m.run(max_steps)
    fault = str(r.fault) if r.fault else ("step budget exhausted" if r.timed_out else None)
    return Outcome(r.exit_code, r.output, fault, r.instructions)


def emulator_available() -> bool:
    try:
        import cpu.emulator  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(params=ENGINES)
def engine(request) -> str:
    """Each test using this runs on unicorn and on the golden emulator."""
    if request.param == "emulator" and not emulator_available():
        pytest.skip("cpu.emulator is not available")
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
