"""Run a firmware ELF on either engine and get one comparable :class:`Outcome`.

``run_on(engine, elf, input_text=None)`` runs on ``"unicorn"`` (:mod:`unicorn_runner`) or
``"emulator"`` (the golden ISA emulator, :mod:`cpu.emulator`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cpu.emulator import Machine
from tests.firmware.unicorn_runner import run_elf

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
    m = Machine.from_elf(elf, None if input_text is None else input_text.encode())
    r = m.run(max_steps)
    fault = str(r.fault) if r.fault else ("step budget exhausted" if r.timed_out else None)
    return Outcome(r.exit_code, r.output, fault, r.instructions)
