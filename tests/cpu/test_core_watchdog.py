"""The token stream's watchdog (cpu/rv32/protocol.py): a core that emits more tokens in a
row than the protocol allows without retiring an instruction stops the run with an error
naming the position and the token (exit 2), on every engine, instead of running until a
``--max-steps`` budget that counts instructions, which such a stream never spends (issue:
damaged cached weights emitted ``Half v=262143`` forever)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cpu import isa
from cpu.rv32 import engines
from cpu.rv32.build import FULL, load_core
from cpu.rv32.protocol import (DIV_DIGITS, DIVSTEP, END, FAULT, FIX, HALF, JUMP, LO, STEP,
                               MAX_TOKENS_WITHOUT_RETIRING, CoreStalled, InputFeed,
                               TraceReader, feed_chunk)
from deltachip.cli import main
from hdl.ir import Token

E = isa.encode
STUCK = Token(HALF, (262143,))


def _reader() -> TraceReader:
    return TraceReader(word_at=lambda pc: 0)


def _worst_division() -> list[Token]:
    """The longest legal stretch without a retirement: after a division (its first DivStep
    retires it), every partial remainder wide (a Half before each later DivStep), its
    result wide at a block end (Half, Lo), the Jump after it faulting (Fault, Half, End)."""
    toks = [Token(JUMP, (0,)), Token(STEP, (1, 0, 0)), Token(DIVSTEP, (0, 0))]
    for i in range(1, DIV_DIGITS):
        toks += [Token(HALF, (1,)), Token(DIVSTEP, (i, 0))]
    toks += [Token(HALF, (1,)), Token(FIX, (0,)), Token(HALF, (1,)), Token(LO, (0,)),
             Token(JUMP, (8,)), Token(FAULT, (0,)), Token(HALF, (0,)), Token(END, (0,))]
    return toks


def test_the_protocols_worst_case_passes():
    assert MAX_TOKENS_WITHOUT_RETIRING == 27
    r = _reader()
    for tok in _worst_division():
        r.feed(tok)
    assert r.fault is not None and r.instructions == 2


def test_one_token_more_than_the_worst_case_stops():
    toks = _worst_division()
    toks.insert(-4, Token(HALF, (1,)))          # one more Half before the Jump
    r = _reader()
    with pytest.raises(CoreStalled) as e:
        for tok in toks:
            r.feed(tok)
    assert e.value.exit_code == 2
    assert str(e.value) == ("the core emitted 28 tokens in a row without retiring an "
                            "instruction, more than the token protocol allows (27): "
                            "position 30 is Token(kind=2, fields=(0,))")


def test_a_stream_of_halfs_stops_at_its_28th_token():
    r = _reader()
    r.feed(Token(JUMP, (0,)))
    with pytest.raises(CoreStalled):
        for _ in range(1000):
            r.feed(STUCK)
    assert r.tokens == 30          # the Jump, the Half that retired it, then 28 Halfs


# ---- every engine, through `deltachip run` -----------------------------------------------
@pytest.fixture
def ret3(build_elf, elf_file) -> Path:
    """A program that exits with 3 (never reached: the engines are made to stall)."""
    words = [E("addi", rd=10, imm=3), E("addi", rd=17, imm=93), E("ecall")]
    code = b"".join(w.to_bytes(4, "little") for w in words)
    return elf_file(build_elf([(0, code, len(code), 5), (0x8_0000, b"", 0x100, 6)]))


class _StuckEngine:
    """Stands for a compiled core whose weights are damaged: every answer is Half
    v=262143. Gives what HFCore and FastCore use of an engine."""
    dtype_name = "bf16"
    chip = {"layers": [], "nonzero_weights": 0}

    def __init__(self, *args, **kwargs):
        self.circuit = load_core(FULL)

    def new_cache(self, batch):
        return None

    def token_id(self, tok):
        return self.circuit.token_id(tok)

    def token_of(self, tid):
        return self.circuit.token_from_id(tid)

    def decode_step(self, ids, cache):
        return torch.tensor([self.token_id(STUCK)])

    def stop_bitmap(self, kinds):
        return None

    def run(self, cache, row, tid, n, stop):
        return np.full(n, self.token_id(STUCK))


STALL = ("{who} emitted 28 tokens in a row without retiring an instruction, more than the "
         "token protocol allows (27): position 29 is Half v=262143; {advice}\n")


@pytest.mark.parametrize("engine", ["hf", "fast"])
def test_a_compiled_core_that_stalls_stops_the_run(engine, ret3, tmp_path, capfd, monkeypatch):
    entry = tmp_path / "rv32-0123-full-compact-bf16"
    monkeypatch.setattr(engines, "compiled_core", lambda *a, **k: entry)
    core = {"hf": engines.HFCore, "fast": engines.FastCore}[engine]
    monkeypatch.setattr(core, "_load", lambda self, path, dtype: _StuckEngine())
    assert main(["run", str(ret3), "--engine", engine, "--max-steps", "100"]) == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert err == STALL.format(who=f"the cached core at {entry}",
                               advice=f"remove it (rm -r {entry}) and run again to rebuild it")


def test_a_users_checkpoint_that_stalls_is_named(ret3, tmp_path, monkeypatch):
    from cpu.rv32.loader import load_program
    monkeypatch.setattr(engines.FastCore, "_load", lambda self, path, dtype: _StuckEngine())
    core = engines.FastCore(load_program(ret3, None), checkpoint=tmp_path / "mine")
    with pytest.raises(CoreStalled) as e:
        core.run(100)
    assert str(e.value) + "\n" == STALL.format(
        who=f"the checkpoint {tmp_path / 'mine'}",
        advice="its weights are damaged or are not this core's")


def test_the_simulated_core_that_stalls_stops_the_run(ret3, capfd, monkeypatch):
    monkeypatch.setattr(engines.SimCore, "_step", lambda self, tok: STUCK)
    assert main(["run", str(ret3), "--engine", "sim", "--max-steps", "100"]) == 2
    assert capfd.readouterr().err == STALL.format(
        who="the core (sim engine)",
        advice="the core does not follow its token protocol (docs/cpu.md): a bug in cpu/rv32")


def _feed_in_chunks(tokens: list[Token], circuit, sizes: list[int]) -> list[tuple]:
    """Feed ``tokens`` to a reader as ``fast_advance`` does (``feed_chunk`` over each
    chunk), the state after every chunk; a CoreStalled as its text."""
    offsets = np.asarray(circuit.kind_offsets())
    r, states, at = _reader(), [], 0
    ids = np.array([circuit.token_id(t) for t in tokens], dtype=np.int64)
    try:
        for n in sizes:
            feed_chunk(r, ids[at:at + n], offsets, circuit.token_from_id, InputFeed())
            at += n
            states.append(_state(r))
    except CoreStalled as e:
        states.append(str(e))
    return states


def _state(r: TraceReader) -> tuple:
    return (r.tokens, r.instructions, bytes(r.output), r.exit_code, str(r.fault), r.pcr,
            r.nx, r.last_pc, r._hi, r._unretired, r.last)


def _one_by_one(tokens: list[Token], sizes: list[int]) -> list[tuple]:
    r, states, at = _reader(), [], 0
    try:
        for n in sizes:
            for tok in tokens[at:at + n]:
                r.feed(tok)
            at += n
            states.append(_state(r))
    except CoreStalled as e:
        states.append(str(e))
    return states


@pytest.mark.parametrize("program, text", [("product", None), ("hello", None),
                                           ("calc", b"7 // 0"), ("calc", b"-(2**70) % 9"),
                                           ("rx_echo", b"ab\xc3"), ("aes128", None)])
def test_feeding_ids_in_bulk_is_feeding_tokens_one_by_one(program, text, firmware_elf,
                                                         tmp_path):
    """TraceReader.feed_ids (fast_advance's bulk path) leaves the reader as feed does, token
    by token, after every chunk of random lengths: instructions, output, exit code or fault,
    the pc state, the watchdog's count and the last token."""
    from firmware import toolchain
    if program == "rx_echo":
        elf = toolchain.build([Path(__file__).parent / "programs" / "rx_echo.c"],
                              tmp_path / "rx_echo.elf")
    else:
        elf = firmware_elf(program)
    from tests.cpu.test_lockstep import sim_stream
    tokens = sim_stream(elf, text)
    circuit = load_core(FULL)
    rng = np.random.default_rng(len(tokens))
    sizes = rng.integers(1, 300, size=len(tokens)).tolist()
    want = _one_by_one(tokens, sizes)
    assert _feed_in_chunks(tokens, circuit, sizes) == want
    assert want[-1][3] is not None or want[-1][4] != "None"        # the run ended


def test_feeding_ids_in_bulk_stops_a_stalled_stream_as_feed_does():
    """The protocol's worst case (a faulting Jump after a division) in bulk is the same as
    one by one; one Half more stalls both with the same text, wherever the chunks end."""
    circuit = load_core(FULL)
    for sizes in ([100], [3] * 12, [17, 17]):
        got = _feed_in_chunks(_worst_division(), circuit, sizes)
        assert got == _one_by_one(_worst_division(), sizes) and got[-1][4] != "None"
    toks = _worst_division()
    toks.insert(-4, Token(HALF, (1,)))
    toks = toks[:-3] + [Token(HALF, (1,))] * 40
    for sizes in ([len(toks)], [5] * 20, [29, 100]):
        got = _feed_in_chunks(toks, circuit, sizes)
        assert got[-1] == _one_by_one(toks, sizes)[-1]
        assert got[-1].startswith("the core emitted 28 tokens in a row")
