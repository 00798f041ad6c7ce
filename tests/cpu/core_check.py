"""Lock-step comparison of the core (engine ``sim``) with the golden emulator (``ref``), and
of the compiled core (``hf``) with ``sim``.

``compare(machine_factory, sizes)`` runs the same loaded program on both, with retire
records, and returns a list of differences (empty when they agree): every record (pc, insn,
rd and its value, data access, next pc), the register writes the core made later through its
tokens (``SimCore.wb_mismatches``), the outcome (exit code, output, fault text, instruction
count) and at the end the register file and RAM contents.

``check_in_prefill(eng, machine_factory, lanes_below)`` asserts sim = ref on the outcome,
then feeds sim's whole token stream through the compiled core ``eng`` (chunked prefill) and
asserts its argmax is sim's next token at every position and its memories sim's after every
chunk; returns the number of positions.
"""
from __future__ import annotations

from typing import Callable

from backends.verify.check import PREFILL_CHUNK, check_engine
from cpu import memmap
from cpu.emulator import Machine
from cpu.rv32.build import FULL, CoreSizes
from cpu.rv32.engines import SimCore
from cpu.rv32.loader import image_of, with_text
from cpu.rv32.protocol import InputFeed


def compare(make: Callable[[], Machine], sizes: CoreSizes = FULL, max_steps: int = 2_000_000,
            sim_backend: str = "auto", text: tuple[list[bytes], list[int]] | None = None
            ) -> tuple[list[str], SimCore]:
    """``text``: (vocabulary, ids), a text stream for UART_TNEXT and UART_TXT: the emulator
    reads the ids' bytes, the core Text(id) tokens and its table ROMs' images."""
    if text is not None:
        vocab, ids = text
        plain = make

        def make() -> Machine:
            m = plain()
            m.text = [vocab[i] for i in ids]
            return m
    ref = make().run
    m_ref = make()
    want = m_ref.run(max_steps, trace=True)
    image = image_of(make(), sizes)
    if text is not None:
        image = with_text(image, *text)
    eng = SimCore(image, sizes, backend=sim_backend)
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


def check_in_prefill(eng, make: Callable[[], Machine], lanes_below: int = 10**9) -> int:
    """See the module docstring; ``eng`` is a loaded :class:`backends.engines.hf.HFEngine` of
    the full core; lanes are compared when the stream is shorter than ``lanes_below``."""
    want = make().run(10**7)
    sim = SimCore(image_of(make(), FULL))
    got = sim.run(10**7)
    assert (got.exit_code, got.output, got.instructions, str(got.fault)) == \
        (want.exit_code, want.output, want.instructions, str(want.fault))
    tokens = sim.reader.tokens
    image = image_of(make(), FULL)
    rep = check_engine(eng, steps=tokens, prefill=True, starts=[image.start],
                       roms=[image.images], lanes=tokens < lanes_below,
                       answers=[InputFeed(make().rx).answer])
    assert rep.ok, "\n".join(rep.problems())
    assert rep.positions == tokens                   # to the halt token
    assert rep.memory_checks == -(-tokens // PREFILL_CHUNK)
    assert rep.lane_checks > 0 or tokens >= lanes_below
    return tokens
