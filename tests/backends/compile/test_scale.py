"""Scale: a 64K-word ROM and an 8K-word RAM on qwen3.5-4b module shapes (slow: builds a
multi-GB checkpoint). Run with ``pytest -m slow tests/backends/compile/test_scale.py``."""
from __future__ import annotations

import random

import pytest
from transformers.utils import logging as hf_logging

from hdl.ir import Circuit, Field, Loc, Memory, Op, Token, TokenKind
from backends.verify.check import check_dir
from backends.compile.pipeline import compile_to_dir

hf_logging.disable_progress_bar()
L = Loc("scale.hdl", 1, 1)


def scale_circuit(rom_words: int = 1 << 16, ram_words: int = 1 << 13) -> Circuit:
    """Go(pc): v = code[pc]; old = data[pc mod 8K]; data[pc mod 8K] <= v;
    next Go(pc + {old, v} + 1)."""
    c = Circuit("Scale", L)
    c.kinds = [TokenKind("Go", (Field("pc", 16),), L)]
    rng = random.Random(5)
    c.memories["code"] = Memory("code", "rom", 8, rom_words, L,
                                init=tuple(rng.getrandbits(8) for _ in range(rom_words)))
    c.memories["data"] = Memory("data", "ram", 8, ram_words, L)
    c.start = Token(0, (12345,))
    pc = c.add(Op.TOKEN_FIELD, 16, param=(0, 0), name="pc")
    v = c.add(Op.MEM_READ, 8, (pc,), param="code", name="v")
    a = c.add(Op.SLICE, 13, (pc,), param=0)
    old = c.add(Op.MEM_READ, 8, (a,), param="data", name="old")
    c.add(Op.MEM_WRITE, 0, (a, v, c.add(Op.CONST, 1, param=1)), param="data")
    step = c.add(Op.CONCAT, 16, (old, v))
    nxt = c.add(Op.ADD, 16, (c.add(Op.ADD, 16, (pc, step)), c.add(Op.CONST, 16, param=1)))
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, param=0), nxt))
    c.check()
    return c


@pytest.mark.slow
def test_rom_64k_ram_8k_on_qwen35_4b_shapes(tmp_path):
    comp = compile_to_dir(scale_circuit(), tmp_path / "scale", target="qwen3.5-4b", dtype="bf16")
    mems = comp.chip["memories"]
    assert mems["code"]["depth"] == 65536 and mems["data"]["depth"] == 8192
    assert all(lay["key_heads"] <= 16 and lay["neurons"] <= 9216 for lay in comp.chip["layers"])
    rep = check_dir(tmp_path / "scale", steps=40, mem_every=10)
    assert rep.ok, [str(m) for m in rep.mismatches]
