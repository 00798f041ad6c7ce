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
                               MAX_TOKENS_WITHOUT_RETIRING, CoreStalled, TraceReader)
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
