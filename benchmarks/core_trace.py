"""A worked trace of the shipped core (cpu/rv32): a short program, one row per token, from
the core in the reference simulator (engine ``sim``), checked against the golden emulator.

    python benchmarks/core_trace.py [--program main|fault|both] [--sizes full|small|tiny]

Prints a Markdown table per program: the position, the token, the instruction it executes
(pc and disassembly), what the step writes to the register file (the write-back of the
previous instruction's result, carried by this token), to RAM, and which of the core's small
state memories it sets (``pcr``, ``prevlo``, ``link``, ``pend``, ``hireg``, ...;
core.hdl). The programs are assembled here (``cpu.isa.encode``), so the trace follows
whatever the current core.hdl emits; docs/cpu.md ("The core") shows this output.

``main`` touches every kind of step a program normally takes: a wide result (Half + Step), a
result that keeps rd's upper bits (Step keep=1), a store and a load, a taken and a
not-taken branch, a UART byte (Out), a wide result at the end of an 8-word block (Half + Lo
+ Jump), a small one there (Lo + Jump), a byte store into RAM (its merged word travels like
a result; the store lands at the next step that is not a Half), a division (DivStep), and
the exit (Half + End).
``fault`` reads the UART's input (Want(0), In(b)), a text token's length and one of its
bytes (Want(1), Want(2), each answered with Text(id): its bytes come from the core's table
ROMs), then ends in a misaligned load: Fault, then Half + End carry the address.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu import isa, memmap  # noqa: E402
from cpu.emulator import Machine  # noqa: E402
from cpu.rv32.build import FULL, SMALL, TINY, CoreSizes, with_text_ids  # noqa: E402
from cpu.rv32.engines import SimCore  # noqa: E402
from cpu.rv32.loader import image_of, with_text  # noqa: E402
from hdl.sim.tokens import format_token  # noqa: E402

SIZES = {"full": FULL, "small": SMALL, "tiny": TINY}
A0, A1, A2, A3, A4, A5, A7, T1, T2 = 10, 11, 12, 13, 14, 15, 17, 6, 7

#: (name, rd, rs1, rs2, imm) as cpu.isa.encode takes them
PROGRAMS: dict[str, list[tuple[str, int, int, int, int]]] = {
    "main": [
        ("lui", A1, 0, 0, memmap.RAM_BASE >> 12),   # a1 = 0x80000: a wide result
        ("addi", A1, A1, 0, 8),                     # 0x80008: only the low 13 bits change
        ("addi", A2, 0, 0, 2),
        ("sw", 0, A1, A2, 0),                       # store a2 at 0x80008
        ("lw", A3, A1, 0, 0),                       # load it back
        ("addi", A3, A3, 0, -1),                    # loop: twice
        ("bne", 0, A3, 0, -4),                      # taken once, then falls through
        ("lui", T1, 0, 0, memmap.UART_TX >> 12),
        ("addi", T2, 0, 0, ord("K")),
        ("sb", 0, T1, T2, 0),                       # UART: prints K
        ("addi", A4, 0, 0, 1000),
        ("addi", A5, 0, 0, -7),
        ("lui", A0, 0, 0, 0x12345),                 # wide, and k is used up: Half, Lo, Jump
        ("div", A0, A4, A5),                        # 1000 / -7 = -142: eight DivSteps
        ("sb", 0, A1, A4, 1),                       # byte 0xe8 into RAM at 0x80009
        ("addi", A7, 0, 0, memmap.EXIT_SYSCALL),    # a small result ending a block: Lo, Jump
        ("ecall", 0, 0, 0, 0),                      # exit(-142)
    ],
    "fault": [
        ("lui", T1, 0, 0, memmap.UART_RX >> 12),
        ("lbu", A3, T1, 0, memmap.UART_RX & 0xFFF),  # the input's first byte: Want, In(b)
        ("lbu", A4, T1, 0, memmap.UART_TNEXT & 0xFFF),  # the first text token's length
        ("lbu", A5, T1, 0, (memmap.UART_TXT & 0xFFF) + 1),  # its byte 1
        ("lui", A1, 0, 0, memmap.RAM_BASE >> 12),
        ("lw", A2, A1, 0, 6),                       # misaligned: address 0x80006
        ("addi", A0, 0, 0, 1),                      # never runs
    ],
}

#: the core's own state memories (core.hdl), listed by name when a step writes them
#: (``prevkind`` and ``prevcl``, written at every step, and ``pst``, ``prevlo``, ``dua`` and
#: ``dub``, at every executing step, are left out)
STATE = ("pcr", "nx", "link", "hireg", "pend", "dctl", "qs", "dval")


#: the input stream a program's UART reads (the core answers its Want with In(b))
INPUT = b"Z"
#: the text vocabulary and the text stream's ids (UART_TNEXT, UART_TXT: Want, Text(id))
VOCAB = [b"Hi", b"!"]
TEXT = [0]


def machine_of(program: list[tuple[str, int, int, int, int]]) -> Machine:
    m = Machine()
    m.load_words([isa.encode(*p) for p in program])
    m.rx = INPUT
    m.text = [VOCAB[i] for i in TEXT]
    return m


def trace_rows(program: list[tuple[str, int, int, int, int]], sizes: CoreSizes = FULL,
               max_tokens: int = 1000) -> tuple[list[list[str]], SimCore]:
    """One row per token of ``program`` on the core (``sizes``): position, token,
    instruction executed, register write, RAM write, state memories written. Raises
    AssertionError when the core's outcome or a register write-back differs from the
    golden emulator's."""
    sizes = with_text_ids(sizes, len(VOCAB))
    eng = SimCore(with_text(image_of(machine_of(program), sizes), VOCAB, TEXT), sizes)
    steps: list = []                 # every StepResult of the simulator, for its writes
    sim_step = eng.sim.step

    def recording_step(tok, trace=False):
        res = sim_step(tok, trace)
        steps.append(res)
        return res
    eng.sim.step = recording_step
    circuit = eng.circuit
    names = isa.ABI_NAMES
    rows: list[list[str]] = []
    records = []
    while True:
        tok = eng.cur
        pos = eng.reader.tokens - 1
        pc = eng.reader.pc_of(tok)
        insn = "" if pc is None else f"`{pc:#06x}: {isa.disassemble(eng.machine.read_word(pc), pc)}`"
        if eng.reader.done:
            rows.append([str(pos), f"`{format_token(circuit, tok)}`", insn, "", "", "(halted)"])
            break
        if len(rows) >= max_tokens:
            raise AssertionError(f"no halt within {max_tokens} tokens")
        eng._advance(records)
        regs = eng.registers()
        writes = steps[-1].writes
        written = sorted({a for m, a, _ in writes if m in ("rhi", "rlo")})
        reg = ", ".join(f"{names[r]} = {regs[r]:#010x}" for r in written)
        ram = _ram_text(writes)
        state = ", ".join(n for n in STATE if any(w[0] == n for w in writes))
        rows.append([str(pos), f"`{format_token(circuit, tok)}`", insn, reg, ram, state])
    want = machine_of(program).run(10_000, trace=True)
    r = eng.reader
    assert (r.exit_code, bytes(r.output), r.instructions, r.fault) == \
        (want.exit_code, want.output, want.instructions, want.fault), "core differs from ref"
    assert records == want.retired, "core's retire records differ from ref's"
    assert not eng.wb_mismatches, eng.wb_mismatches
    return rows, eng


def _ram_text(writes: list[tuple[str, int, int]]) -> str:
    """The RAM word written at this step as ``[0x80008] = 0x00000002``."""
    return "".join(f"[{memmap.RAM_BASE + 4 * a:#x}] = 0x{d:08x}" for m, a, d in writes if m == "ramw")


def markdown(rows: list[list[str]]) -> str:
    head = ["#", "token", "executes", "register write", "RAM write", "state written"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", choices=[*PROGRAMS, "both"], default="both")
    ap.add_argument("--sizes", choices=SIZES, default="full",
                    help="the core's memory sizes (the trace is the same for each)")
    args = ap.parse_args(argv)
    sizes = SIZES[args.sizes]
    for name in PROGRAMS if args.program == "both" else [args.program]:
        rows, eng = trace_rows(PROGRAMS[name], sizes)
        r = eng.reader
        outcome = (f"fault: {r.fault}" if r.fault else f"exit code {r.exit_code}")
        print(f"### `{name}`: {r.instructions} instructions, {r.tokens} tokens, "
              f"output {bytes(r.output)!r}, {outcome}\n")
        print(markdown(rows))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
