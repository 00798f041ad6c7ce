"""Loader: an ELF (+ ``--input`` text) → the core's memory images and its first token.

Takes: an ELF path and optional input text (placed exactly as the ``ref`` engine places it:
:meth:`cpu.emulator.Machine.from_elf` loads the segments and the input, so a program the
emulator refuses is refused here with the same error), and :class:`CoreSizes`. Gives:
:class:`CoreImage`: ``images`` (memory name → words, for ``hdl.sim.Simulator(roms=...)`` and
``HFEngine(roms=...)``), the ``start`` token ``Jump(entry / 4)``, and the machine it came from.

Pre-decoding (the word layout is in ``ops.hdl``; four ROMs: ``code``, ``codehi``, ``regs``,
``rdrom``): every code word becomes its op, rd (0 when
the instruction writes no register), rs1, rs2 (a read of x0 becomes a read of entry 32) and a finished 32-bit immediate: lui/auipc's
result, the branch/jal target byte address (and a flag when that target is misaligned or
outside code ROM), the I/S immediate sign-extended. No tokens are spent on loading.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from common.errors import UserError
from cpu import isa, memmap
from cpu.emulator import Machine
from cpu.rv32.build import FULL, CoreSizes, op_codes
from hdl.ir import Token

M = 0xFFFF_FFFF
JUMP_KIND = 0          # the index of token kind Jump in core.hdl
X0_READ = 32           # the register-file entry x0 is read at (core.hdl: never written)


class CoreLoadError(UserError):
    """The program does not fit the (small) core's memories."""


@dataclass
class CoreImage:
    images: dict[str, list[int]]
    start: Token
    machine: Machine          # the loaded program as the emulator sees it (not run)
    #: the text stream's token ids (what UART_TNEXT moves through: :func:`with_text`)
    text: tuple[int, ...] = ()


#: the table ROMs that hold each text token's length and bytes (core.hdl: Text)
TEXT_TABLES = ("tlen", "tb0", "tb1", "tb2", "tb3")


def text_tables(vocab: Sequence[bytes]) -> dict[str, list[int]]:
    """The images of the core's text table ROMs for a vocabulary (``vocab[i]``: text id
    i's bytes): ``tlen`` the length (at most 255), ``tbK`` bytes 8K..8K+7 little-endian
    (the first :data:`cpu.memmap.TEXT_BYTES` bytes of each)."""
    n = memmap.TEXT_BYTES
    out: dict[str, list[int]] = {"tlen": [min(len(t), 255) for t in vocab]}
    padded = [bytes(t[:n]).ljust(n, b"\0") for t in vocab]
    for k in range(n // 8):
        out[f"tb{k}"] = [int.from_bytes(p[8 * k:8 * k + 8], "little") for p in padded]
    return out


def with_text(image: CoreImage, vocab: Sequence[bytes], ids: Sequence[int]) -> CoreImage:
    """``image`` with a text stream: the token ids ``ids`` of vocabulary ``vocab``, which
    the emulator reads as their bytes and the core as ``Text(id)`` tokens (their bytes from
    the table ROMs, whose images this adds)."""
    image.machine.text = [bytes(vocab[i]) for i in ids]
    image.images |= text_tables(vocab)
    image.text = tuple(ids)
    return image


def _op_name(name: str) -> str:
    return "OP_" + name.upper().replace(".", "_")


#: the ROMs of pre-decoded words (ops.hdl), one word each per code word
PREDECODED = ("code", "codehi", "regs", "rdrom")


def predecode(word: int, pc: int) -> dict[str, int]:
    """The pre-decoded words of instruction ``word`` at byte ``pc``, by ROM name
    (:data:`PREDECODED`; ops.hdl layout)."""
    ops = op_codes()
    d = isa.decode(word) if word else None
    use_imm = bad = msa = msb = men = lsen = shen = 0
    rd = rs1 = rs2 = imm = 0
    if d is None:
        op = ops["OP_ILLEGAL"]
    elif not d.spec.supported:
        op = ops["OP_EBREAK"] if d.name == "ebreak" else ops["OP_UNSUPPORTED"]
    else:
        n = d.name
        fmt = d.spec.fmt
        rs1, rs2 = d.rs1, d.rs2
        rd = d.rd if d.writes_rd else 0
        if n in ("lui", "auipc"):
            op = ops["OP_CONST"]
            imm = (d.imm + (pc if n == "auipc" else 0)) & M
            rs1 = rs2 = 0
        elif n == "ecall":                      # reads a7 (the call) and a0 (exit code)
            op = ops["OP_ECALL"]
            rs1, rs2 = memmap.REG_A7, memmap.REG_A0
        elif n == "fence":
            op = ops["OP_FENCE"]
            rs1 = rs2 = 0
        elif fmt in (isa.Fmt.B, isa.Fmt.J):
            op = ops[_op_name(n)]
            target = pc + d.imm
            bad = int(bool(target & 3) or not 0 <= target < memmap.CODE_END)
            imm = target & M
        elif fmt in (isa.Fmt.I, isa.Fmt.SHIFT):
            if n == "jalr":
                op = ops["OP_JALR"]
            else:
                base = {"addi": "add", "slti": "slt", "sltiu": "sltu", "xori": "xor",
                        "ori": "or", "andi": "and", "slli": "sll", "srli": "srl",
                        "srai": "sra"}[n]
                op = ops[_op_name(base)]
                use_imm = 1
                shen = int(base in ("sll", "srl", "sra"))
            imm = d.imm & M
            rs2 = 0
        else:                                   # R, LOAD, S
            op = ops[_op_name(n)]
            imm = d.imm & M
            msa, msb = int(n in ("mulh", "mulhsu")), int(n == "mulh")
            men = int(n in ("mul", "mulh", "mulhsu", "mulhu"))
            shen = int(n in ("sll", "srl", "sra"))
            lsen = int(fmt is isa.Fmt.S or n in ("lb", "lh", "lw", "lbu", "lhu"))
    rs1, rs2 = rs1 or X0_READ, rs2 or X0_READ
    return {"code": op | use_imm << 6 | bad << 7 | (imm & 0xFFFF) << 8, "codehi": imm >> 16,
            "regs": (rd | rs1 << 5 | rs2 << 11 | msa << 17 | msb << 18 | men << 19 | lsen << 20
                     | shen << 21), "rdrom": rd}


def _words(mem: bytes) -> list[int]:
    """``mem`` as little-endian 32-bit words (a last partial word zero-padded)."""
    raw = bytes(mem)
    raw += b"\0" * (-len(raw) % 4)
    return np.frombuffer(raw, dtype="<u4").tolist()


def _fit(what: str, words: list[int], depth: int, sizes: CoreSizes) -> list[int]:
    nz = np.flatnonzero(np.asarray(words, dtype=np.uint32)) if words else ()
    last = int(nz[-1]) if len(nz) else -1
    if last >= depth:
        raise CoreLoadError(f"the program's {what} reaches word {last}, past the {depth} words "
                            f"of core '{sizes.name}'")
    return words[:depth]


def image_of(machine: Machine, sizes: CoreSizes = FULL) -> CoreImage:
    """The core's initial memories for a loaded (not yet run) ``machine``."""
    mem = machine.mem
    code = _words(mem[memmap.CODE_BASE:memmap.CODE_END])
    code = _fit("code", code, sizes.code_words, sizes)
    rodata = _fit("rodata", _words(mem[memmap.RODATA_BASE:memmap.RODATA_END]),
                  sizes.rodata_words, sizes)
    ram = bytes(mem[memmap.RAM_BASE:memmap.RAM_END])
    ram_words = _fit("RAM data", _words(ram), sizes.ram_words, sizes)
    zero = predecode(0, 0)              # a zero word decodes alike at every pc
    decoded = [predecode(w, 4 * i) if w else zero for i, w in enumerate(code)]
    images = {name: [d[name] for d in decoded] for name in PREDECODED}
    images |= {"rawcode": code, "rodata": rodata,
               "rhi": [r >> 13 for r in machine.regs] + [0] * 32,
               "rlo": [r & 0x1FFF for r in machine.regs] + [0] * 32,
               "ramw": ram_words}
    if machine.pc & 3 or not 0 <= machine.pc < 4 * sizes.code_words:
        raise CoreLoadError(f"entry point 0x{machine.pc:08x} is outside core '{sizes.name}''s code ROM")
    return CoreImage(images, Token(JUMP_KIND, (machine.pc >> 2,)), machine)


def load_program(path: str | Path, input_text: bytes | str | None = None,
                 sizes: CoreSizes = FULL) -> CoreImage:
    """Load an ELF (and ``--input`` text) as the ``ref`` engine does, then build the images."""
    return image_of(Machine.from_elf(path, input_text), sizes)
