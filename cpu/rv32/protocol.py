"""Reading the core's token stream (the trace protocol of docs/cpu.md, "The trace").

:class:`TraceReader` is fed the tokens one by one (``feed``) and keeps what a ``deltachip
run`` engine reports: the instructions retired, the UART bytes, and the exit code or the
fault. It does no arithmetic the core should do: the pc it reports for an instruction is the
protocol's own (the current 8-word block: the last Jump's, or the one after it once a Next
ran; and the Step's lo), the values come from the tokens.

Kinds (core.hdl): Jump(pc), Step(lo, keep, v), Half(v), Lo(v), Out(lo, go, b),
Fault(cause), End(v), DivStep(v, i), Fix(v), Next(keep, v), Want(m), In(b), Text(id).
The core emits Want(m) after a byte load from the UART's input; whoever runs it feeds In(next
input byte), or for the text registers Text(a text token's id), in its place
(:class:`InputFeed`), so the stream the reader sees has In or Text there.
An executing token (Jump, Step, Next, Out with go = 1) is one instruction; it retires (and is
counted when the next token arrives) unless the next token is a Fault. Fault(cause) →
Half(hi) → End(lo) gives the fault's value; Half(hi) → End(lo) after an instruction is the
exit code (hi: the upper 18 bits, lo: the lower 14).

The reader is also the engines' watchdog: a stream that goes on for more than
:data:`MAX_TOKENS_WITHOUT_RETIRING` tokens in a row without retiring an instruction, and
without ending, is none the core can make (damaged weights, a core that does not match this
protocol), and ``feed`` raises :class:`CoreStalled` naming the position and the token, so a
``--max-steps`` budget, which counts instructions, is never waited out on such a stream.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from common.errors import UserError
from cpu import memmap
from cpu.emulator import Fault, FaultCause, fault_of
from hdl.ir import Token

JUMP, STEP, HALF, LO, OUT, FAULT, END, DIVSTEP, FIX, NEXT, WANT, IN, TEXT = range(13)
#: Want's modes: which input register the load read (core.hdl)
WANT_RX, WANT_TNEXT, WANT_TXT = range(3)
#: The kinds :meth:`TraceReader.feed_ids` leaves to :meth:`TraceReader.feed`: the ending, and
#: the input (a Want is answered by whoever runs the core).
_ONE_BY_ONE = np.array([k in (FAULT, END, WANT, IN, TEXT) for k in range(13)])
_EXECUTING = np.array([k in (JUMP, STEP, NEXT) for k in range(13)])

#: the quotient digits of a division (radix 8, 32 bits: cpu/rv32/mdu.hdl), one DivStep each
DIV_DIGITS = 11
#: The most tokens that execute nothing between two executing tokens (docs/cpu.md, "The
#: token protocol"): a division's. Its DivSteps (:data:`DIV_DIGITS`), a Half before each
#: but the first (a partial remainder wider than 13 bits), a Half and a Fix after the last
#: (the unsigned result), then the ending of an instruction's step at its widest: a Half (a
#: result that fits neither way) and a Lo (the end of a block where a Next cannot go), which
#: a Jump follows. Every other case is shorter: a load from code ROM takes two Halfs and a
#: Lo, a UART byte at a block end an Out with go = 0, the exit a Half and an End.
MAX_OVERHEAD = DIV_DIGITS + (DIV_DIGITS - 1) + 2 + 2
#: The most tokens in a row that retire nothing in a stream that has not ended: a retirement
#: is counted at the token after an executing one, so the worst is a division's first
#: DivStep (which retires the division) followed by the rest of its :data:`MAX_OVERHEAD`
#: tokens, the executing Jump after the Lo (retired by the token after it), and, when that
#: instruction faults, its Fault and Half (the End after them ends the stream).
MAX_TOKENS_WITHOUT_RETIRING = (MAX_OVERHEAD - 1) + 1 + 2


class CoreStalled(UserError):
    """The token stream went on for more tokens than the protocol allows without retiring
    an instruction (see the module docstring); the message names the position (the start
    token is position 0) and the token, then who made it and what to do."""


def executes(tok: Token) -> bool:
    """True for a token that executes an instruction (Jump, Step, Next, Out with go = 1)."""
    return tok.kind in (JUMP, STEP, NEXT) or (tok.kind == OUT and tok.fields[1] != 0)
CAUSES = list(FaultCause)


@dataclass
class InputFeed:
    """The run's input as the core reads it: every engine passes each token the core
    emits through :meth:`answer`, which puts the answer in the place of a ``Want``: the core
    asked for input, and the answer is the next position's token. ``Want(0)`` (UART_RX) is
    answered with ``In(next byte of data)`` (``In(0)`` once used up); ``Want(1)``
    (UART_TNEXT) with ``Text(next id of text)`` (``In(0)`` once used up) and ``Want(2)``
    (UART_TXT) with ``Text(the current id)`` (``In(0)`` before the first): ids only, no
    bytes, since the core's table ROMs hold each id's bytes. What the golden emulator reads
    from the same registers (:meth:`cpu.emulator.Machine.read_rx`)."""
    data: bytes = b""
    pos: int = 0
    text: tuple[int, ...] = ()
    text_pos: int = -1

    def answer(self, tok: Token) -> Token:
        if tok.kind != WANT:
            return tok
        if tok.fields[0] == WANT_RX:
            b = self.data[self.pos] if self.pos < len(self.data) else 0
            self.pos = min(self.pos + 1, len(self.data))
            return Token(IN, (b,))
        if tok.fields[0] == WANT_TNEXT:
            self.text_pos = min(self.text_pos + 1, len(self.text))
        if 0 <= self.text_pos < len(self.text):
            return Token(TEXT, (self.text[self.text_pos],))
        return Token(IN, (0,))


def _s32(v: int) -> int:
    return v - (1 << 32) if v & 0x8000_0000 else v


@dataclass
class TraceReader:
    """Consumes tokens (``feed``); see the module docstring. ``word_at(pc)`` gives the
    instruction word at a byte pc (for the fault text); ``show(token)`` its text (for
    :class:`CoreStalled`); ``source`` names what makes the tokens and ``advice`` what to do
    when it stalls, both for that message."""
    word_at: object
    show: Callable[[Token], str] = repr
    source: str = "the core"
    advice: str = ""
    instructions: int = 0
    tokens: int = 0
    output: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    fault: Fault | None = None
    pcr: int = 0
    nx: int = 0                      # 1 once a Next ran since the last Jump
    last_pc: int | None = None       # byte pc of the last executing token
    _prev: Token | None = None
    _fault_cause: int | None = None
    _fault_pc: int | None = None
    _hi: int = 0
    _unretired: int = 0              # tokens in a row that retired nothing

    @property
    def done(self) -> bool:
        return self.exit_code is not None or self.fault is not None

    def pc_of(self, tok: Token) -> int | None:
        """The byte pc an executing token runs (None for the others)."""
        if tok.kind == JUMP:
            return tok.fields[0] << 2
        if tok.kind == NEXT:
            return ((self.pcr & ~7) + 8) << 2
        if executes(tok):
            return ((self.pcr & ~7) + 8 * self.nx + tok.fields[0]) << 2
        return None

    @property
    def last(self) -> Token | None:
        """The last token fed."""
        return self._prev

    def feed_ids(self, ids: np.ndarray, kinds: np.ndarray, token_of: Callable[[int], Token]
                 ) -> int:
        """Account for the tokens ``ids`` (kind indices ``kinds``) up to the first Fault,
        End, Want or In, exactly as :meth:`feed` one by one would, decoding only the tokens
        whose fields it reads (``token_of``: id to token): Outs, the last Jump, Half and
        executing token, and the last token. Returns how many it took; the caller feeds the
        rest. A prefix in which :meth:`feed` would raise is fed one by one (so it raises)."""
        kinds = np.asarray(kinds)
        stop = np.flatnonzero(_ONE_BY_ONE[kinds])
        n = int(stop[0]) if len(stop) else len(ids)
        if n == 0:
            return 0
        ids, kinds = ids[:n], kinds[:n]
        outs = np.flatnonzero(kinds == OUT)
        out_toks = [token_of(int(ids[i])) for i in outs]
        exe = _EXECUTING[kinds].copy()
        for i, t in zip(outs, out_toks):
            exe[i] = t.fields[1] != 0
        prev_exe = self._prev is not None and executes(self._prev)
        retire = np.concatenate([[prev_exe], exe[:-1]])        # token i retires token i - 1
        r = np.flatnonzero(retire)
        if len(r):
            runs = [self._unretired + int(r[0]), n - 1 - int(r[-1])]
            if len(r) > 1:
                runs.append(int(np.max(np.diff(r))) - 1)
            unretired = n - 1 - int(r[-1])
        else:
            runs = [self._unretired + n]
            unretired = self._unretired + n
        if max(runs) > MAX_TOKENS_WITHOUT_RETIRING:
            for tid in ids.tolist():                # raises CoreStalled where feed would
                self.feed(token_of(tid))
            return n
        self.tokens += n
        self.instructions += len(r)
        self._unretired = unretired
        self.output.extend(t.fields[2] for t in out_toks)
        ex = np.flatnonzero(exe)
        if len(ex):
            e = int(ex[-1])
            jumps = np.flatnonzero(kinds[:e] == JUMP)
            lo = int(jumps[-1]) + 1 if len(jumps) else 0
            if len(jumps):
                self.pcr, self.nx = token_of(int(ids[jumps[-1]])).fields[0], 0
            if np.any(kinds[lo:e] == NEXT):
                self.nx = 1
            tok = token_of(int(ids[e]))
            self.last_pc = self.pc_of(tok)
            if tok.kind == JUMP:
                self.pcr, self.nx = tok.fields[0], 0
            elif tok.kind == NEXT:
                self.nx = 1
        halves = np.flatnonzero(kinds == HALF)
        if len(halves):
            self._hi = token_of(int(ids[halves[-1]])).fields[0]
        self._prev = token_of(int(ids[-1]))
        return n

    def feed(self, tok: Token) -> None:
        """Account for the next token of the stream (the start token included)."""
        prev = self._prev
        self.tokens += 1
        if prev is not None and executes(prev) and tok.kind != FAULT:
            self.instructions += 1                # the previous instruction retired
            self._unretired = 0
        else:
            self._unretired += 1
        if tok.kind == FAULT:
            cause = CAUSES[tok.fields[0]]
            if prev is not None and executes(prev):
                self._fault_pc = self.last_pc     # that instruction faulted: not retired
            else:                                 # fell past the end of code ROM on resuming
                self._fault_pc = memmap.CODE_END
            self._fault_cause = tok.fields[0]
            if cause is FaultCause.FETCH_OUTSIDE_CODE:
                self._fault_pc = memmap.CODE_END
        if tok.kind == OUT:
            self.output.append(tok.fields[2])
        if executes(tok):
            self.last_pc = self.pc_of(tok)
            if tok.kind == JUMP:
                self.pcr, self.nx = tok.fields[0], 0
            elif tok.kind == NEXT:
                self.nx = 1
        if tok.kind == HALF:
            self._hi = tok.fields[0]
        elif tok.kind == END:
            value = ((self._hi << 14) | tok.fields[0]) & 0xFFFF_FFFF
            if self._fault_cause is None:
                self.exit_code = _s32(value)
            else:
                pc = self._fault_pc
                cause = CAUSES[self._fault_cause]
                insn = None if cause is FaultCause.FETCH_OUTSIDE_CODE else self.word_at(pc)
                self.fault = fault_of(pc, insn, cause, value)
        self._prev = tok
        if self._unretired > MAX_TOKENS_WITHOUT_RETIRING and not self.done:
            raise CoreStalled(
                f"{self.source} emitted {self._unretired} tokens in a row without retiring an "
                f"instruction, more than the token protocol allows "
                f"({MAX_TOKENS_WITHOUT_RETIRING}): position {self.tokens - 1} is "
                f"{self.show(tok)}" + (f"; {self.advice}" if self.advice else ""))


def feed_chunk(reader: "TraceReader", ids: np.ndarray, offsets: np.ndarray,
               token_of: Callable[[int], Token], feed: InputFeed) -> None:
    """Account for a chunk of ids an engine made (``offsets``: the circuit's kind offsets)
    in ``reader`` (a :class:`TraceReader`, or what stands in for one: ``feed_ids``,
    ``feed``, ``done``, ``last``): its bulk path over the prefix it takes, then the tokens
    one by one, each Want answered by ``feed`` (what the engine is given next), until the
    run is done. ``reader.last`` is then the token the engine goes on from."""
    took = reader.feed_ids(ids, np.searchsorted(offsets, ids, side="right") - 1, token_of)
    for tid in ids[took:].tolist():
        reader.feed(feed.answer(token_of(tid)))
        if reader.done:
            break
