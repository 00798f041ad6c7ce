"""The golden RV32IM + Zba ISA emulator: the ``ref`` engine every other engine is compared with.

A :class:`Machine` holds 32 registers (unsigned 32-bit ints, ``regs[0]`` always 0), the pc and
one flat byte array for code ROM, rodata ROM and RAM (:mod:`cpu.memmap`). Before a run the
code ROM is pre-decoded once into one closure per word: calling it executes the instruction
and returns the next pc, so the inner loop is ``pc = table[pc >> 2]()`` with no decoding and
no string work. Faults and the exit ``ecall`` leave the loop as exceptions.

:meth:`Machine.run` returns a :class:`RunResult`; with ``trace=True`` it also returns one
:class:`Retire` record per retired instruction (the lock-step format later engines are
compared with; see docs/cpu.md). Every way a program can leave the ISA (illegal or refused
instruction, misaligned or unmapped access, store to ROM, jump outside code ROM, an
``ecall`` other than exit) stops the machine with a :class:`Fault` naming the pc, the
instruction word and the cause.

Conventions: the exit ``ecall`` counts as a retired instruction (its record has
``next_pc = pc + 4``); a faulting instruction does not retire. The host must be
little-endian (the memory views are native-order ``memoryview`` casts).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, NamedTuple

from cpu import isa, memmap
from cpu.elf import ElfError, ElfImage, read_elf, region_of, span_text

if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
    raise ImportError("cpu.emulator needs a little-endian host")

M = 0xFFFF_FFFF
SIGN = 0x8000_0000
_ROM_LIMIT = memmap.RODATA_END          # loads below this address hit code or rodata ROM
_RAM_BASE, _RAM_END = memmap.RAM_BASE, memmap.RAM_END
_CODE_END = memmap.CODE_END
_UART = memmap.UART_TX
_RX = memmap.UART_RX
_TNEXT = memmap.UART_TNEXT
_TXT = memmap.UART_TXT
_TXT_END = memmap.UART_TXT + memmap.TEXT_BYTES


def _uart_in(a: int) -> bool:
    """True for an address a byte load reads input from (UART_RX, UART_TNEXT, UART_TXT)."""
    return a == _RX or a == _TNEXT or _TXT <= a < _TXT_END
_N_SLOTS = memmap.CODE_SIZE // 4


class Retire(NamedTuple):
    """One retired instruction.

    ``rd``/``rd_value``: the destination register and its new value, both ``None`` when the
    instruction writes no register or rd is x0. ``mem_*``: the data access (``None`` when
    there is none); ``mem_data`` is the value stored, or the raw (zero-extended) value read
    from memory before any sign extension; ``mem_width`` in bytes (1, 2, 4).
    """
    pc: int
    insn: int
    rd: int | None
    rd_value: int | None
    mem_addr: int | None
    mem_data: int | None
    mem_width: int | None
    is_store: bool
    next_pc: int

    def format(self) -> str:
        """The ``--trace`` line (docs/cpu.md): ``pc insn rd=value mem next``, hex."""
        reg = f"x{self.rd}=0x{self.rd_value:08x}" if self.rd is not None else "-"
        if self.mem_addr is None:
            mem = "-"
        else:
            mem = (f"{'W' if self.is_store else 'R'}{self.mem_width}"
                   f"[0x{self.mem_addr:08x}]=0x{self.mem_data:0{2 * self.mem_width}x}")
        return f"{self.pc:08x} {self.insn:08x} {reg} {mem} {self.next_pc:08x}"


class FaultCause(Enum):
    """Why the machine stopped on a fault. The value is the text used in messages."""
    ILLEGAL_INSTRUCTION = "illegal instruction"
    UNSUPPORTED_INSTRUCTION = "unsupported instruction"
    EBREAK = "ebreak"
    BAD_ECALL = "unsupported ecall"
    MISALIGNED_LOAD = "misaligned load"
    MISALIGNED_STORE = "misaligned store"
    LOAD_ACCESS = "load from unmapped address"
    STORE_ACCESS = "store to unmapped address"
    STORE_TO_ROM = "store to ROM"
    BAD_JUMP = "jump target outside code ROM"
    MISALIGNED_JUMP = "misaligned jump target"
    FETCH_OUTSIDE_CODE = "instruction fetch outside code ROM"


@dataclass(frozen=True)
class Fault:
    """A machine fault: where (pc, the instruction word or None for a fetch fault), the cause
    and details (the address involved, etc.)."""
    pc: int
    insn: int | None
    cause: FaultCause
    detail: str = ""

    def __str__(self) -> str:
        if self.insn is None:
            where = f"pc 0x{self.pc:08x}"
        elif isa.decode(self.insn) is None:
            where = f"pc 0x{self.pc:08x}, instruction 0x{self.insn:08x}"
        else:
            where = (f"pc 0x{self.pc:08x}, instruction 0x{self.insn:08x} "
                     f"({isa.disassemble(self.insn, self.pc)})")
        text = f"machine fault at {where}: {self.cause.value}"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass
class RunResult:
    """The outcome of :meth:`Machine.run`.

    ``exit_code`` is a0 as a signed 32-bit int when the program exited, else None;
    ``instructions`` the number retired in this call; ``timed_out`` is True when
    ``max_steps`` ran out first; ``retired`` the records when ``trace=True``."""
    exit_code: int | None
    output: bytes
    instructions: int
    fault: Fault | None
    retired: list[Retire] | None
    timed_out: bool


class InputError(ElfError):
    """``--input`` cannot be placed: no input buffer in the ELF, or the text is too long."""


class _Trap(Exception):
    """Raised inside an instruction closure; the run loop adds pc and word."""

    def __init__(self, cause: FaultCause, detail: str = "") -> None:
        self.cause, self.detail = cause, detail


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


#: Zicntr's read-only counters (csrrs rd, CSR, x0: rdcycle, rdtime, rdinstret and their
#: high halves): CSR number -> True for a high half. All three read the count of
#: instructions retired before the reading one (one instruction = one cycle = one tick).
ZICNTR_CSRS = {0xC00: False, 0xC01: False, 0xC02: False,
               0xC80: True, 0xC81: True, 0xC82: True}


_COUNTER_NAMES = {0xC00: "rdcycle", 0xC01: "rdtime", 0xC02: "rdinstret",
                  0xC80: "rdcycleh", 0xC81: "rdtimeh", 0xC82: "rdinstreth"}


class _CsrRead(Exception):
    """Raised by a Zicntr counter read: the run loop, which knows the count, writes rd."""

    def __init__(self, rd: int, high: bool) -> None:
        self.rd, self.high = rd, high


def is_counter_read(d: isa.Decoded | None) -> bool:
    """True for ``csrrs rd, cycle|time|instret[h], x0`` (rdcycle, rdtime, rdinstret, ...)."""
    return (d is not None and d.name == "csrrs" and d.rs1 == 0
            and (d.imm & 0xFFF) in ZICNTR_CSRS)


def _s32(v: int) -> int:
    return v - (1 << 32) if v & SIGN else v


def _div(a: int, b: int) -> int:
    if b == 0:
        return M
    sa, sb = _s32(a), _s32(b)
    if sa == -SIGN and sb == -1:
        return SIGN
    q = abs(sa) // abs(sb)
    return (-q if (sa < 0) != (sb < 0) else q) & M


def _rem(a: int, b: int) -> int:
    if b == 0:
        return a
    sa, sb = _s32(a), _s32(b)
    if sa == -SIGN and sb == -1:
        return 0
    r = abs(sa) % abs(sb)
    return (-r if sa < 0 else r) & M


def check_input(image: ElfImage, text: bytes) -> int:
    """The address ``text`` (NUL-terminated) is written at as the program's input;
    :class:`InputError` when the program has no input buffer or ``text`` does not fit it."""
    buf = image.symbols.get(memmap.INPUT_BUFFER_SYMBOL)
    if buf is None:
        raise InputError(f"{image.path}: --input given but the program has no input buffer "
                         f"(no symbol {memmap.INPUT_BUFFER_SYMBOL} in the ELF)")
    size = input_capacity(image)
    if b"\0" in text:
        raise InputError("--input text must not contain NUL bytes")
    if size is not None and len(text) + 1 > size:
        raise InputError(f"--input text is {len(text)} bytes; the program's input buffer "
                         f"holds {size} bytes including the terminating NUL")
    end = buf.value + len(text) + 1
    if not (_RAM_BASE <= buf.value and end <= _RAM_END):
        raise InputError(f"{image.path}: input buffer at 0x{buf.value:08x} "
                         f"({len(text) + 1} bytes needed) is not inside RAM")
    return buf.value


def input_capacity(image: ElfImage) -> int | None:
    """The capacity in bytes of the program's input buffer: ``__input_size``, an absolute
    symbol whose value is the size or a 4-byte variable holding it (its value as loaded);
    else the size of the ``__input_buffer`` object; None when there is no buffer or its
    size is not known."""
    if memmap.INPUT_BUFFER_SYMBOL not in image.symbols:
        return None
    sym = image.symbols.get(memmap.INPUT_SIZE_SYMBOL)
    if sym is None:
        return image.symbols[memmap.INPUT_BUFFER_SYMBOL].size or None
    if sym.shndx == "SHN_ABS" or sym.size == 0:
        return sym.value
    if region_of(sym.value, 4) is None:
        raise InputError(f"{image.path}: {memmap.INPUT_SIZE_SYMBOL} at 0x{sym.value:08x} is "
                         "not inside one memory region")
    word = bytearray(4)             # what the loader leaves there: the segments' bytes, else 0
    for seg in image.segments:
        for i in range(4):
            if 0 <= sym.value + i - seg.vaddr < len(seg.data):
                word[i] = seg.data[sym.value + i - seg.vaddr]
    return int.from_bytes(word, "little")


class Machine:
    """An RV32IM + Zba machine with the shipped memory map.

    Build one with :meth:`from_elf`, or ``Machine()`` then :meth:`write` / :meth:`load_words`
    for hand-assembled tests. ``regs`` (list of 32 unsigned ints) and ``pc`` may be read and
    set between runs; :meth:`read` / :meth:`write` access memory by address (loader view:
    ROM is writable through them).
    """

    def __init__(self, entry: int = memmap.CODE_BASE) -> None:
        self.regs: list[int] = [0] * 32
        self.regs[memmap.REG_SP] = memmap.STACK_TOP
        self.pc: int = entry
        self.mem = bytearray(memmap.RAM_END)
        mv = memoryview(self.mem)
        self._views = (mv, mv.cast("b"), mv.cast("H"), mv.cast("h"), mv.cast("I"))
        self.output = bytearray()
        #: the input stream a byte load from UART_RX reads (0 once used up), and where
        self.rx: bytes = b""
        self.rx_pos = 0
        self.rx_last = 0                 # the byte the last input load read
        #: the text stream (each text token's bytes) that UART_TNEXT and UART_TXT read, and
        #: the index of the current token (-1: none read yet)
        self.text: list[bytes] = []
        self.text_pos = -1
        self.symbols: dict[str, int] = {}
        self.exit_code: int | None = None
        self.fault: Fault | None = None
        self._table: list[Callable[[], int]] | None = None
        self._decoded: list[isa.Decoded | None] = []
        self._meta: list[tuple] | None = None
        #: instructions retired by all runs so far (what rdinstret/rdcycle/rdtime read)
        self.instret = 0

    # ------------------------------------------------------------ loading

    @classmethod
    def from_elf(cls, path: str | Path, input_text: bytes | str | None = None) -> "Machine":
        """Load an ELF (see :mod:`cpu.elf`); with ``input_text`` (bytes, or str as UTF-8),
        write it NUL-terminated at the ELF's ``__input_buffer`` (:class:`InputError` if
        there is none or it does not fit ``__input_size``) and make it the input stream
        that byte loads from ``UART_RX`` read."""
        image = read_elf(path)
        if isinstance(input_text, str):
            input_text = input_text.encode("utf-8")
        m = cls(image.entry)
        for seg in image.segments:
            m.write(seg.vaddr, seg.data + bytes(seg.memsz - len(seg.data)))
        m.symbols = {name: s.value for name, s in image.symbols.items()}
        if input_text is not None:
            m._place_input(image, input_text)
            m.rx = bytes(input_text)
        return m

    def read_rx(self, a: int = _RX) -> int:
        """A byte load from the UART's input at ``a``: UART_RX, the next byte of the input
        stream (0 once it is used up), consumed; UART_TNEXT, the next text token's length
        (at most 255; 0 once the text is used up); UART_TXT + j, byte j of the current
        text token (0 past its end, or before the first token)."""
        b = 0
        if a == _RX:
            if self.rx_pos < len(self.rx):
                b = self.rx[self.rx_pos]
                self.rx_pos += 1
        elif a == _TNEXT:
            self.text_pos = min(self.text_pos + 1, len(self.text))
            if self.text_pos < len(self.text):
                b = min(len(self.text[self.text_pos]), 255)
        elif 0 <= self.text_pos < len(self.text):
            tok = self.text[self.text_pos]
            j = a - _TXT
            b = tok[j] if j < len(tok) else 0
        self.rx_last = b
        return b

    def _place_input(self, image: ElfImage, text: bytes) -> None:
        buf = check_input(image, text)
        self.write(buf, text + b"\0")

    def load_words(self, words: list[int], addr: int = memmap.CODE_BASE) -> None:
        """Write instruction words (little-endian) at ``addr``: for hand-assembled tests."""
        self.write(addr, b"".join((w & M).to_bytes(4, "little") for w in words))

    def write(self, addr: int, data: bytes) -> None:
        """Write bytes into code ROM, rodata ROM or RAM (loader access, ROM allowed)."""
        self._check_span(addr, len(data))
        self.mem[addr:addr + len(data)] = data
        if addr < _CODE_END:
            self._table = None

    def read(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes from code ROM, rodata ROM or RAM."""
        self._check_span(addr, size)
        return bytes(self.mem[addr:addr + size])

    def read_word(self, addr: int) -> int:
        """The little-endian word at ``addr`` (the core's engines name a faulting insn)."""
        return int.from_bytes(self.read(addr, 4), "little")

    @staticmethod
    def _check_span(addr: int, size: int) -> None:
        if size and region_of(addr, size) is None:
            raise ValueError(f"{span_text(addr, size)} is not inside one memory region")

    # ------------------------------------------------------------ running

    def run(self, max_steps: int, trace: bool = False) -> RunResult:
        """Run until exit, fault or ``max_steps`` retired instructions; see :class:`RunResult`.

        Without ``trace`` it takes the fast path (no records). A halted machine (exited or
        faulted) returns its stored outcome with 0 instructions."""
        if max_steps < 0:
            raise ValueError("max_steps must be >= 0")
        out_start = len(self.output)
        if self.exit_code is not None or self.fault is not None:
            return RunResult(self.exit_code, b"", 0, self.fault, [] if trace else None, False)
        if self.pc & 3 or not 0 <= self.pc < _CODE_END:
            self.fault = Fault(self.pc, None, FaultCause.FETCH_OUTSIDE_CODE,
                               "the pc is not a word address in code ROM")
            return RunResult(None, b"", 0, self.fault, [] if trace else None, False)
        if self._table is None:
            self._build_table()
        retired: list[Retire] | None = [] if trace else None
        if trace:
            n = self._run_trace(max_steps, retired)
        else:
            n = self._run_fast(max_steps)
        self.instret += n
        done = self.exit_code is not None or self.fault is not None
        return RunResult(self.exit_code, bytes(self.output[out_start:]), n, self.fault, retired,
                         timed_out=not done)

    def _stop(self, exc: Exception, pc: int) -> None:
        """Record the exit or the fault of the instruction at ``pc`` (which stays the pc)."""
        self.pc = pc
        if isinstance(exc, _Exit):
            self.exit_code = exc.code
        else:
            assert isinstance(exc, _Trap)
            insn = self._views[4][pc >> 2] if pc < _CODE_END else None
            self.fault = Fault(pc, insn, exc.cause, exc.detail)

    def _counter(self, c: _CsrRead, n: int) -> int:
        """Execute a counter read (:class:`_CsrRead`) as the run's instruction ``n``;
        returns the value written to rd."""
        count = self.instret + n
        value = (count >> 32 if c.high else count) & M
        if c.rd:
            self.regs[c.rd] = value
        return value

    def _run_fast(self, max_steps: int) -> int:
        table = self._table
        pc = self.pc
        n = -1
        start = 0
        while True:
            try:
                for n in range(start, max_steps):
                    pc = table[pc >> 2]()
                break
            except _Exit as e:
                self._stop(e, pc)
                return n + 1
            except _Trap as e:
                self._stop(e, pc)
                return n
            except _CsrRead as c:                 # rare: resume after the counter read
                self._counter(c, n)
                pc += 4
                start = n + 1
        self.pc = pc
        return max_steps

    def _run_trace(self, max_steps: int, out: list[Retire]) -> int:
        """The fast loop plus one :class:`Retire` per instruction, from per-slot metadata
        (:meth:`_trace_meta`): the access address and store data are taken before the
        instruction runs, rd's value and the loaded bytes after."""
        table, regs, mem = self._table, self.regs, self.mem
        if self._meta is None:
            self._meta = self._trace_meta()
        meta = self._meta
        append = out.append
        pc = self.pc
        for n in range(max_steps):
            slot = pc >> 2
            word, rd, access = meta[slot] if slot < _N_SLOTS else (None, None, None)
            if access is None:
                try:
                    npc = table[slot]()
                except _Exit as e:
                    append(Retire(pc, word, None, None, None, None, None, False, pc + 4))
                    self._stop(e, pc)
                    return n + 1
                except _Trap as e:
                    self._stop(e, pc)
                    return n
                except _CsrRead as c:
                    value = self._counter(c, n)
                    npc = pc + 4
                    append(Retire(pc, word, c.rd or None, value if c.rd else None, None, None,
                                  None, False, npc))
                    pc = npc
                    continue
                if rd is None:
                    append(Retire(pc, word, None, None, None, None, None, False, npc))
                else:
                    append(Retire(pc, word, rd, regs[rd], None, None, None, False, npc))
            else:
                is_store, width, rs1, imm, rs2 = access
                addr = (regs[rs1] + imm) & M
                data = regs[rs2] & ((1 << (8 * width)) - 1) if is_store else 0
                try:
                    npc = table[slot]()
                except _Trap as e:
                    self._stop(e, pc)
                    return n
                if not is_store:
                    data = (self.rx_last if _uart_in(addr)
                            else int.from_bytes(mem[addr:addr + width], "little"))
                append(Retire(pc, word, rd, None if rd is None else regs[rd], addr, data, width,
                              is_store, npc))
            pc = npc
        self.pc = pc
        return max_steps

    _WIDTHS = {"lb": 1, "lbu": 1, "sb": 1, "lh": 2, "lhu": 2, "sh": 2, "lw": 4, "sw": 4}

    def _trace_meta(self) -> list[tuple]:
        """Per code slot: (word, rd written or None, None or (is_store, width, rs1, imm, rs2))."""
        words = self._views[4]
        meta: list[tuple] = []
        for slot, d in enumerate(self._decoded):
            if d is None:
                meta.append((words[slot], None, None))
                continue
            width = self._WIDTHS.get(d.name)
            access = None if width is None else (d.spec.fmt is isa.Fmt.S, width, d.rs1, d.imm, d.rs2)
            meta.append((d.word, d.rd if d.writes_rd else None, access))
        return meta

    # ------------------------------------------------------------ pre-decoding

    def _build_table(self) -> None:
        words = self._views[4][:_N_SLOTS]
        table: list[Callable[[], int]] = [None] * (_N_SLOTS + 1)  # type: ignore[list-item]
        decoded: list[isa.Decoded | None] = [None] * _N_SLOTS
        zero = _make_trap(None)
        for slot, word in enumerate(words):
            if word == 0:
                table[slot] = zero
                continue
            d = isa.decode(word)
            decoded[slot] = d
            table[slot] = self._compile(d, slot * 4)

        def fetch_fault() -> int:
            raise _Trap(FaultCause.FETCH_OUTSIDE_CODE, _FETCH_DETAIL)
        table[_N_SLOTS] = fetch_fault
        self._table, self._decoded, self._meta = table, decoded, None

    def _compile(self, d: isa.Decoded | None, pc: int) -> Callable[[], int]:
        """The closure executing ``d`` at ``pc``: it returns the next pc or raises."""
        if is_counter_read(d):
            exc = _CsrRead(d.rd, ZICNTR_CSRS[d.imm & 0xFFF])

            def counter() -> int:
                raise exc
            return counter
        if d is None or not d.spec.supported:
            return _make_trap(d)
        return _COMPILERS[d.spec.fmt](self, d, pc)


# ---------------------------------------------------------------- instruction closures

def _make_trap(d: isa.Decoded | None) -> Callable[[], int]:
    """The closure for a word that does not execute: illegal, ebreak, or refused."""
    if d is None:
        cause, detail = FaultCause.ILLEGAL_INSTRUCTION, "not an RV32IM/Zba encoding"
    elif d.name == "ebreak":
        cause, detail = FaultCause.EBREAK, ""
    elif is_counter_read(d):
        name = _COUNTER_NAMES[d.imm & 0xFFF]
        cause, detail = (FaultCause.UNSUPPORTED_INSTRUCTION,
                         f"{name} (a Zicntr counter read) is not implemented by the compiled "
                         "core yet; it runs on --engine ref only (docs/firmware.md)")
    else:
        cause, detail = FaultCause.UNSUPPORTED_INSTRUCTION, f"{d.name} is not supported"

    def trap() -> int:
        raise _Trap(cause, detail)
    return trap


def _target_trap(target: int) -> _Trap | None:
    """The fault a jump to ``target`` raises, or None when it is a valid code address."""
    if target & 3:
        return _Trap(FaultCause.MISALIGNED_JUMP, f"target 0x{target & M:08x} is not a multiple of 4")
    if not 0 <= target < _CODE_END:
        return _Trap(FaultCause.BAD_JUMP, f"target 0x{target & M:08x} is outside code ROM "
                     f"0x{memmap.CODE_BASE:08x}..0x{_CODE_END:08x}")
    return None


def _compile_r(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rd, rs1, rs2, npc, n = m.regs, d.rd, d.rs1, d.rs2, pc + 4, d.name
    if rd == 0:
        return lambda: npc
    if n == "add":
        def f():
            regs[rd] = (regs[rs1] + regs[rs2]) & M
            return npc
    elif n == "sub":
        def f():
            regs[rd] = (regs[rs1] - regs[rs2]) & M
            return npc
    elif n == "sll":
        def f():
            regs[rd] = (regs[rs1] << (regs[rs2] & 31)) & M
            return npc
    elif n == "slt":
        def f():
            regs[rd] = 1 if (regs[rs1] ^ SIGN) < (regs[rs2] ^ SIGN) else 0
            return npc
    elif n == "sltu":
        def f():
            regs[rd] = 1 if regs[rs1] < regs[rs2] else 0
            return npc
    elif n == "xor":
        def f():
            regs[rd] = regs[rs1] ^ regs[rs2]
            return npc
    elif n == "srl":
        def f():
            regs[rd] = regs[rs1] >> (regs[rs2] & 31)
            return npc
    elif n == "sra":
        def f():
            regs[rd] = (((regs[rs1] ^ SIGN) - SIGN) >> (regs[rs2] & 31)) & M
            return npc
    elif n == "or":
        def f():
            regs[rd] = regs[rs1] | regs[rs2]
            return npc
    elif n == "and":
        def f():
            regs[rd] = regs[rs1] & regs[rs2]
            return npc
    elif n == "mul":
        def f():
            regs[rd] = (regs[rs1] * regs[rs2]) & M
            return npc
    elif n == "mulh":
        def f():
            regs[rd] = ((((regs[rs1] ^ SIGN) - SIGN) * ((regs[rs2] ^ SIGN) - SIGN)) >> 32) & M
            return npc
    elif n == "mulhsu":
        def f():
            regs[rd] = ((((regs[rs1] ^ SIGN) - SIGN) * regs[rs2]) >> 32) & M
            return npc
    elif n == "mulhu":
        def f():
            regs[rd] = (regs[rs1] * regs[rs2]) >> 32
            return npc
    elif n == "div":
        def f():
            regs[rd] = _div(regs[rs1], regs[rs2])
            return npc
    elif n == "divu":
        def f():
            b = regs[rs2]
            regs[rd] = regs[rs1] // b if b else M
            return npc
    elif n == "rem":
        def f():
            regs[rd] = _rem(regs[rs1], regs[rs2])
            return npc
    elif n == "remu":
        def f():
            b = regs[rs2]
            regs[rd] = regs[rs1] % b if b else regs[rs1]
            return npc
    elif n in ("sh1add", "sh2add", "sh3add"):
        sh = int(n[2])

        def f():
            regs[rd] = ((regs[rs1] << sh) + regs[rs2]) & M
            return npc
    else:  # pragma: no cover - the table and this function list the same names
        raise AssertionError(n)
    return f


def _compile_i(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rd, rs1, imm, npc, n = m.regs, d.rd, d.rs1, d.imm, pc + 4, d.name
    if n == "jalr":
        return _compile_jalr(m, d, pc)
    if rd == 0:
        return lambda: npc
    uimm = imm & M
    if n == "addi":
        def f():
            regs[rd] = (regs[rs1] + imm) & M
            return npc
    elif n == "slti":
        simm = uimm ^ SIGN

        def f():
            regs[rd] = 1 if (regs[rs1] ^ SIGN) < simm else 0
            return npc
    elif n == "sltiu":
        def f():
            regs[rd] = 1 if regs[rs1] < uimm else 0
            return npc
    elif n == "xori":
        def f():
            regs[rd] = regs[rs1] ^ uimm
            return npc
    elif n == "ori":
        def f():
            regs[rd] = regs[rs1] | uimm
            return npc
    elif n == "andi":
        def f():
            regs[rd] = regs[rs1] & uimm
            return npc
    else:  # pragma: no cover
        raise AssertionError(n)
    return f


def _compile_shift(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rd, rs1, sh, npc, n = m.regs, d.rd, d.rs1, d.imm, pc + 4, d.name
    if rd == 0:
        return lambda: npc
    if n == "slli":
        def f():
            regs[rd] = (regs[rs1] << sh) & M
            return npc
    elif n == "srli":
        def f():
            regs[rd] = regs[rs1] >> sh
            return npc
    else:
        def f():
            regs[rd] = (((regs[rs1] ^ SIGN) - SIGN) >> sh) & M
            return npc
    return f


def _compile_u(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rd, npc = m.regs, d.rd, pc + 4
    if rd == 0:
        return lambda: npc
    value = (d.imm + (pc if d.name == "auipc" else 0)) & M

    def f():
        regs[rd] = value
        return npc
    return f


def _compile_jal(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rd, link, target = m.regs, d.rd, (pc + 4) & M, pc + d.imm
    trap = _target_trap(target)
    if trap is not None:
        def bad():
            raise trap
        return bad
    if rd == 0:
        return lambda: target

    def f():
        regs[rd] = link
        return target
    return f


def _compile_jalr(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rd, rs1, imm, link = m.regs, d.rd, d.rs1, d.imm, (pc + 4) & M

    def f():
        t = (regs[rs1] + imm) & 0xFFFF_FFFE
        if t & 2 or t >= _CODE_END:
            raise _target_trap(t)
        if rd:
            regs[rd] = link
        return t
    return f


def _compile_b(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rs1, rs2, npc, n = m.regs, d.rs1, d.rs2, pc + 4, d.name
    target: int | None = pc + d.imm
    trap = _target_trap(target)
    if trap is not None:      # a bad target faults only when taken: f returns None then
        target = None
    if n == "beq":
        def f():
            return target if regs[rs1] == regs[rs2] else npc
    elif n == "bne":
        def f():
            return target if regs[rs1] != regs[rs2] else npc
    elif n == "blt":
        def f():
            return target if (regs[rs1] ^ SIGN) < (regs[rs2] ^ SIGN) else npc
    elif n == "bge":
        def f():
            return target if (regs[rs1] ^ SIGN) >= (regs[rs2] ^ SIGN) else npc
    elif n == "bltu":
        def f():
            return target if regs[rs1] < regs[rs2] else npc
    else:
        def f():
            return target if regs[rs1] >= regs[rs2] else npc
    if trap is None:
        return f

    def checked():
        next_pc = f()
        if next_pc is None:
            raise trap
        return next_pc
    return checked


def _load_fault(a: int, width: int) -> _Trap:
    a &= M
    if a & (width - 1):
        return _Trap(FaultCause.MISALIGNED_LOAD,
                     f"address 0x{a:08x} is not a multiple of {width}")
    what = (" (the UART's output is write-only)" if a == _UART else
            " (the UART's input takes byte loads (lb, lbu) only)" if _uart_in(a) else "")
    return _Trap(FaultCause.LOAD_ACCESS, f"address 0x{a:08x}{what}")


def _store_fault(a: int, width: int) -> _Trap:
    """The fault of a ``width``-byte store to ``a`` (mod 2^32) outside RAM and not a UART sb."""
    if a & (width - 1):
        return _Trap(FaultCause.MISALIGNED_STORE, f"address 0x{a:08x} is not a multiple of {width}")
    if a == _UART:
        return _Trap(FaultCause.STORE_ACCESS,
                     f"address 0x{a:08x} (the UART takes byte stores (sb) only)")
    if a < _ROM_LIMIT:
        region = "code ROM" if a < memmap.CODE_END else "rodata ROM"
        return _Trap(FaultCause.STORE_TO_ROM, f"address 0x{a:08x} is in {region}")
    return _Trap(FaultCause.STORE_ACCESS, f"address 0x{a:08x}")


def _ecall_fault(a7: int) -> _Trap:
    return _Trap(FaultCause.BAD_ECALL, f"a7 = {a7} (only "
                 f"{memmap.EXIT_SYSCALL}, exit, is supported)")


_FETCH_DETAIL = f"execution ran past the end of code ROM (0x{_CODE_END:08x})"


def fault_of(pc: int, insn: int | None, cause: FaultCause, value: int) -> Fault:
    """The :class:`Fault` the emulator reports for ``cause`` at ``pc`` (``insn`` the word
    there, None for a fetch fault), where ``value`` is the cause's one number: the access
    address (loads, stores), the jump target, or a7 (a bad ecall); ignored otherwise.
    Other engines build their fault text with this, so it is the emulator's text exactly."""
    d = isa.decode(insn) if insn else None
    width = Machine._WIDTHS.get(d.name, 1) if d is not None else 1
    if cause in (FaultCause.ILLEGAL_INSTRUCTION, FaultCause.UNSUPPORTED_INSTRUCTION,
                 FaultCause.EBREAK):
        trap = _make_trap(d if cause is not FaultCause.ILLEGAL_INSTRUCTION else None)
        try:
            trap()
        except _Trap as t:
            return Fault(pc, insn, t.cause, t.detail)
    if cause is FaultCause.BAD_ECALL:
        t = _ecall_fault(value)
    elif cause in (FaultCause.MISALIGNED_LOAD, FaultCause.LOAD_ACCESS):
        t = _load_fault(value, width)
    elif cause in (FaultCause.MISALIGNED_STORE, FaultCause.STORE_ACCESS, FaultCause.STORE_TO_ROM):
        t = _store_fault(value & M, width)
    elif cause in (FaultCause.BAD_JUMP, FaultCause.MISALIGNED_JUMP):
        t = _target_trap(value) or _Trap(cause)
    else:
        t = _Trap(FaultCause.FETCH_OUTSIDE_CODE, _FETCH_DETAIL)
    return Fault(pc, insn, t.cause, t.detail)


def _compile_load(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rd, rs1, imm, npc, n = m.regs, d.rd, d.rs1, d.imm, pc + 4, d.name
    b, sb, h, sh, w = m._views
    view, shift, width = {"lb": (sb, 0, 1), "lbu": (b, 0, 1), "lh": (sh, 1, 2),
                          "lhu": (h, 1, 2), "lw": (w, 2, 4)}[n]
    amask = width - 1
    if rd == 0:
        def f0():
            a = regs[rs1] + imm
            if a & amask or not (0 <= a < _ROM_LIMIT or _RAM_BASE <= a < _RAM_END):
                if _uart_in(a) and width == 1:
                    m.read_rx(a)                  # the byte is consumed, x0 keeps 0
                    return npc
                raise _load_fault(a, width)
            return npc
        return f0
    if shift == 0:
        signed = n == "lb"

        def f():
            a = regs[rs1] + imm
            if not (0 <= a < _ROM_LIMIT or _RAM_BASE <= a < _RAM_END):
                if not _uart_in(a):
                    raise _load_fault(a, width)
                b = m.read_rx(a)
                regs[rd] = (b - 256 if signed and b & 0x80 else b) & M
                return npc
            regs[rd] = view[a] & M
            return npc
    else:
        def f():
            a = regs[rs1] + imm
            if a & amask or not (0 <= a < _ROM_LIMIT or _RAM_BASE <= a < _RAM_END):
                raise _load_fault(a, width)
            regs[rd] = view[a >> shift] & M
            return npc
    return f


def _compile_store(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    regs, rs1, rs2, imm, npc, n = m.regs, d.rs1, d.rs2, d.imm, pc + 4, d.name
    b, _, h, _, w = m._views
    view, shift, width = {"sb": (b, 0, 1), "sh": (h, 1, 2), "sw": (w, 2, 4)}[n]
    amask, vmask = width - 1, (1 << (8 * width)) - 1
    output = m.output

    def slow(a: int) -> None:
        a &= M
        if a == _UART and width == 1:
            output.append(regs[rs2] & 0xFF)
            return
        raise _store_fault(a, width)

    if shift == 0:
        def f():
            a = regs[rs1] + imm
            if _RAM_BASE <= a < _RAM_END:
                view[a] = regs[rs2] & 0xFF
            else:
                slow(a)
            return npc
    else:
        def f():
            a = regs[rs1] + imm
            if a & amask or not _RAM_BASE <= a < _RAM_END:
                slow(a)
            else:
                view[a >> shift] = regs[rs2] & vmask
            return npc
    return f


def _compile_system(m: Machine, d: isa.Decoded, pc: int) -> Callable[[], int]:
    npc = pc + 4
    if d.name == "fence":
        return lambda: npc
    regs = m.regs                                   # ecall

    def f():
        if regs[memmap.REG_A7] == memmap.EXIT_SYSCALL:
            raise _Exit(_s32(regs[memmap.REG_A0]))
        raise _ecall_fault(regs[memmap.REG_A7])
    return f


_COMPILERS: dict[object, Callable[[Machine, isa.Decoded, int], Callable[[], int]]] = {
    isa.Fmt.R: _compile_r,
    isa.Fmt.I: _compile_i,
    isa.Fmt.SHIFT: _compile_shift,
    isa.Fmt.U: _compile_u,
    isa.Fmt.J: _compile_jal,
    isa.Fmt.B: _compile_b,
    isa.Fmt.LOAD: _compile_load,
    isa.Fmt.S: _compile_store,
    isa.Fmt.NONE: _compile_system,
}
