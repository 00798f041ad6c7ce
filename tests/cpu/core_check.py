"""Lock-step comparison of the core (engine ``sim``) with the golden emulator (``ref``).

``compare(machine_factory, sizes)`` runs the same loaded program on both, with retire
records, and returns a list of differences (empty when they agree): every record (pc, insn,
rd and its value, data access, next pc), the register writes the core made later through its
tokens (``SimCore.wb_mismatches``), the outcome (exit code, output, fault text, instruction
count) and at the end the register file and RAM contents.
"""
from __future__ import annotations

from typing import Callable

from cpu import memmap
from cpu.emulator import Machine
from cpu.rv32.build import FULL, CoreSizes
from cpu.rv32.engines import SimCore
from cpu.rv32.loader import image_of


def compare(make: Callable[[], Machine], sizes: CoreSizes = FULL, max_steps: int = 2_000_000,
            sim_backend: str = "auto") -> tuple[list[str], SimCore]:
    ref = make().run
    m_ref = make()
    want = m_ref.run(max_steps, trace=True)
    eng = SimCore(image_of(make(), sizes), sizes, backend=sim_backend)
    got = eng.run(max_steps, trace=True)
    diffs: list[str] = []
    for i, (a, b) in enumerate(zip(want.retired, got.retired)):
        if a != b:
            diffs.append(f"instruction {i}: ref {a}, sim {b}")
            break
    if len(want.retired) != len(got.retired):
        diffs.append(f"ref retired {len(want.retired)} records, sim {len(got.retired)}")
    diffs += eng.wb_mismatches[:3]
    for what in ("exit_code", "output", "instructions", "timed_out"):
        if getattr(want, what) != getattr(got, what):
            diffs.append(f"{what}: ref {getattr(want, what)!r}, sim {getattr(got, what)!r}")
    wf, gf = str(want.fault) if want.fault else None, str(got.fault) if got.fault else None
    if wf != gf:
        diffs.append(f"fault: ref {wf!r}, sim {gf!r}")
    regs = eng.registers()
    if not want.timed_out and regs != m_ref.regs:
        diffs.append(f"registers: ref {m_ref.regs}, sim {regs}")
    # a store lands at the step after it (core.hdl): compared when the run ended, not when
    # the budget stopped it with a store in flight
    ram = b"".join(w.to_bytes(4, "little") for w in eng.sim.memory("ramw"))
    want_ram = bytes(m_ref.mem[memmap.RAM_BASE:memmap.RAM_END])
    if sizes.ram_words * 4 < len(want_ram):        # a small core's RAM is a ring
        n = sizes.ram_words * 4
        folded = bytearray(n)
        for off in range(0, len(want_ram), n):
            chunk = want_ram[off:off + n]
            for j, byte in enumerate(chunk):
                folded[j] |= byte
        want_ram = bytes(folded)
    if ram != want_ram and not want.timed_out:
        first = next(i for i in range(len(ram)) if ram[i] != want_ram[i])
        diffs.append(f"RAM differs first at offset 0x{first:x}")
    del ref
    return diffs, eng
