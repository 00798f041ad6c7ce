"""The core's token stream in lock-step with the golden emulator, instruction by instruction.

Takes: the tokens a core engine emits (any engine: the stream is the protocol of docs/cpu.md,
"The token protocol") and a fresh :class:`cpu.emulator.Machine` of the same program and
input. Gives: :class:`LockStep`, fed the tokens one by one, which steps the emulator one
instruction per executing token and checks, at every retired instruction:

- the pc the token executes (the protocol's own pc, :class:`TraceReader`) against the
  emulator's;
- the value the stream writes back for the previous instruction (its rd, or the merged word
  of a byte or halfword store to RAM) against the emulator's, decoded from the tokens as the
  protocol's table says: ``sext(v)`` or the low 13 bits with the upper 19 kept (``keep``),
  ``{hi, keep, v}`` after a Half, a Lo's 14 bits, a Jump's link (``pc + 4`` of a jal/jalr);
- the UART bytes, the exit code or the fault at the end.

Every disagreement is listed in ``mismatches`` (position, token, what each side says); the
checker stops listing after ``MAX_LISTED``. It reads values from the tokens and compares
them; it computes nothing the core computes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cpu import isa, memmap
from cpu.emulator import Machine, Retire
from cpu.rv32.protocol import (END, FAULT, HALF, JUMP, LO, NEXT, OUT, STEP, TraceReader,
                               executes)
from hdl.ir import Token

MAX_LISTED = 20
_MASK = 0xFFFF_FFFF


def _sext13(v: int) -> int:
    return (v - (1 << 13) if v & 0x1000 else v) & _MASK


@dataclass
class _Pending:
    """An executed instruction whose write-back is still to come in the stream."""
    rec: Retire
    target: str              # "reg", "mem" (a byte/halfword store to RAM) or "none"
    new: int                 # the value the emulator wrote there
    old: int                 # the value there before (for ``keep``)
    link: bool               # a jal/jalr: its link comes with the next Jump


@dataclass
class LockStep:
    """See the module docstring. ``feed`` every token, the start token first."""
    machine: Machine
    reader: TraceReader = field(init=False)
    checked: int = 0                 # retired instructions checked
    writebacks: int = 0              # write-back values compared
    mismatches: list[str] = field(default_factory=list)
    _pos: int = -1
    _prev: Token | None = None
    _hi: int | None = None           # the last Half's v, while it is the previous token
    _pending: _Pending | None = None

    def __post_init__(self) -> None:
        self.reader = TraceReader(word_at=self.machine.read_word)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    # the reader's counters, so that a LockStep stands in for the TraceReader of a run
    @property
    def done(self) -> bool:
        return self.reader.done

    @property
    def instructions(self) -> int:
        return self.reader.instructions

    @property
    def tokens(self) -> int:
        return self.reader.tokens

    @property
    def last(self) -> Token | None:
        return self._prev

    def _say(self, tok: Token, text: str) -> None:
        if len(self.mismatches) < MAX_LISTED:
            self.mismatches.append(f"position {self._pos} ({tok}): {text}")
        elif len(self.mismatches) == MAX_LISTED:
            self.mismatches.append("... (more not listed)")

    def feed_ids(self, ids, kinds, token_of) -> int:
        """The bulk path of :meth:`TraceReader.feed_ids`: the checker takes every token by
        itself (:meth:`feed`), so it takes none here."""
        return 0

    def feed(self, tok: Token) -> None:
        self._pos += 1
        prev = self._prev
        after_half = prev is not None and prev.kind == HALF
        if self._pending is not None and tok.kind in (JUMP, STEP, NEXT, LO, OUT):
            self._write_back(tok, after_half, prev)
        elif self._pending is not None and tok.kind == FAULT:
            self._pending = None
        self.reader.feed(tok)
        if executes(tok):
            self._execute(tok)
        self._prev = tok

    def _write_back(self, tok: Token, after_half: bool, prev: Token | None) -> None:
        p = self._pending
        assert p is not None
        self._pending = None
        if tok.kind == JUMP:
            if prev is not None and prev.kind == LO:
                return                              # the Lo wrote it
            if p.target != "none" and not p.link:
                self._say(tok, f"no value written back for {_show(p.rec)}")
            return                                  # a link is pc + 4: the pc check covers it
        if tok.kind == OUT:
            got = _sext13(0)
            keep = 0
        elif tok.kind == LO:
            v = tok.fields[0]
            if after_half:
                got, keep = ((prev.fields[0] << 14) | v) & _MASK, 0
            else:
                keep, got = (v >> 13) & 1, v & 0x1FFF
        else:
            keep, v = tok.fields[-2], tok.fields[-1]
            if after_half:
                got, keep = ((prev.fields[0] << 14) | (keep << 13) | v) & _MASK, 0
            else:
                got = v
        if tok.kind != OUT and not after_half:
            got = (p.old & ~0x1FFF | got) & _MASK if keep else _sext13(got)
        self.writebacks += 1
        if p.target == "none" or p.link:
            return      # nothing written (the value is unused), or a link: it comes with a Jump
        want = p.new
        if got != want:
            self._say(tok, f"writes back 0x{got:08x} for {_show(p.rec)}, the emulator "
                           f"0x{want:08x}")

    def _execute(self, tok: Token) -> None:
        m = self.machine
        pc = self.reader.pc_of(tok)
        if m.exit_code is not None or m.fault is not None:
            self._say(tok, f"executes pc 0x{pc:08x} after the emulator stopped")
            return
        if pc != m.pc:
            self._say(tok, f"executes pc 0x{pc:08x}, the emulator 0x{m.pc:08x}")
        word = m.read_word(m.pc)
        d = isa.decode(word)
        store_addr = None
        if d is not None and d.spec.name in ("sb", "sh"):
            addr = (m.regs[d.rs1] + d.imm) & _MASK
            if memmap.RAM_BASE <= addr < memmap.RAM_BASE + memmap.RAM_SIZE:
                store_addr = addr & ~3
        old = (m.read_word(store_addr) if store_addr is not None else
               m.regs[d.rd] if d is not None and d.rd else 0)
        res = m.run(1, trace=True)
        if not res.retired:
            return                                  # faulted (or exited): compared at the end
        rec = res.retired[0]
        self.checked += 1
        if store_addr is not None:
            self._pending = _Pending(rec, "mem", m.read_word(store_addr), old, False)
        elif rec.rd is not None:
            link = d is not None and d.spec.name in ("jal", "jalr")
            self._pending = _Pending(rec, "reg", rec.rd_value, old, link)
        else:
            self._pending = _Pending(rec, "none", 0, 0, False)

    def finish(self, complete: bool = True) -> None:
        """Compare the outcome: the output so far, and with ``complete`` (the stream ran to
        its end) the exit code or fault, which both sides must have reached."""
        m, r = self.machine, self.reader
        if complete and not r.done:
            self._say(Token(END, ()), f"the stream ended after {r.instructions:,} instructions "
                                      "without an exit or a fault")
        m_done = complete
        if bytes(r.output) != bytes(m.output):
            self._say(Token(END, ()), f"output {bytes(r.output)[-40:]!r}, the emulator "
                                      f"{bytes(m.output)[-40:]!r}")
        if not m_done:
            return
        if r.exit_code != m.exit_code:
            self._say(Token(END, ()), f"exit code {r.exit_code}, the emulator {m.exit_code}")
        if (r.fault is None) != (m.fault is None) or (r.fault and str(r.fault) != str(m.fault)):
            self._say(Token(END, ()), f"fault {r.fault}, the emulator {m.fault}")


def _show(rec: Retire) -> str:
    return f"pc 0x{rec.pc:08x} ({isa.disassemble(rec.insn, rec.pc)})"
