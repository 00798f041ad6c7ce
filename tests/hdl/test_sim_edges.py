"""Simulator behaviour that the mutation run (scripts/mutate.py sim) found untested: runs
longer than the C engine's chunk, trace values of sinks, memory(), many write ports."""
from __future__ import annotations

import pytest

from hdl.ir import Circuit, Field, Memory, NOLOC, Op, Token, TokenKind
from hdl.sim import SimError, Simulator
from tests.hdl.test_sim import counter, rw_circuit

BACKENDS = ["c", "python"]


def wrapping_counter() -> Circuit:
    """Count(v: u8) -> Count(v + 1 mod 256), never halting."""
    c = Circuit("Wrap", NOLOC)
    c.kinds = [TokenKind("Count", (Field("v", 8),), NOLOC)]
    v = c.add(Op.TOKEN_FIELD, 8, (), (0, 0))
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, (), 0), c.add(Op.ADD, 8, (v, c.add(Op.CONST, 8, (), 1)))))
    c.start = Token(0, (0,))
    c.check()
    return c


def test_c_run_continues_past_one_chunk():
    """The C run loop works in chunks of 65,536 steps; a longer run goes on to the end."""
    c = wrapping_counter()
    sim = Simulator(c, backend="c")
    n = (1 << 16) + 1000
    toks = sim.run(c.start, n)
    assert len(toks) == n + 1 and toks[-1] == Token(0, (n % 256,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_trace_values_of_sinks_are_zero(backend):
    """StepResult.values: every node's value by id, 0 for the sinks (writes, the output)."""
    c = counter()
    r = Simulator(c, backend=backend).step(Token(0, (2,)), trace=True)
    sinks = [n.id for n in c.nodes if n.op in (Op.MEM_WRITE, Op.TOKEN_OUT)]
    assert sinks and all(r.values[i] == 0 for i in sinks)
    assert len(r.values) == len(c.nodes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_of_one_and_unknown_names(backend):
    sim = Simulator(rw_circuit(), backend=backend)
    sim.step(Token(0, (2, 77, 1)))
    assert sim.memory("ram") == [0, 0, 77, 0, 0] and sim.memory("rom") == [7, 8, 9]
    with pytest.raises(SimError, match="unknown memory 'nope'"):
        sim.memory("nope")
    assert Simulator(rw_circuit(), {"ram": [5]}, backend=backend).memory("ram") == [5, 0, 0, 0, 0]


def many_writes(n: int) -> Circuit:
    """T(a: u3, d: u8): writes d + i to address a of each of n RAMs u8[8]."""
    c = Circuit("Many", NOLOC)
    c.kinds = [TokenKind("T", (Field("a", 3), Field("d", 8)), NOLOC)]
    a = c.add(Op.TOKEN_FIELD, 3, (), (0, 0))
    d = c.add(Op.TOKEN_FIELD, 8, (), (0, 1))
    one = c.add(Op.CONST, 1, (), 1)
    for i in range(n):
        c.memories[f"m{i}"] = Memory(f"m{i}", "ram", 8, 8, NOLOC)
        c.add(Op.MEM_WRITE, 0, (a, c.add(Op.ADD, 8, (d, c.add(Op.CONST, 8, (), i))), one), f"m{i}")
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, (), 0), c.add(Op.ADD, 3, (a, c.add(Op.CONST, 3, (), 1))), d))
    c.start = Token(0, (0, 9))
    c.check()
    return c


def test_many_write_ports_agree_between_backends():
    """12 write ports in one step: the C step's write buffer holds them all."""
    c = many_writes(12)
    got = {}
    for b in BACKENDS:
        sim = Simulator(c, backend=b)
        rs = [sim.step(Token(0, (a, 200 + a))) for a in range(8)]
        got[b] = ([r.writes for r in rs], sim.memories)
    assert got["c"] == got["python"]
    assert got["c"][0][3] == [(f"m{i}", 3, (203 + i) % 256) for i in range(12)]


def test_many_write_ports_in_the_run_loop():
    """The same 12 write ports through run() (the C run loop has its own write buffer)."""
    c = many_writes(12)
    got = {}
    for b in BACKENDS:
        sim = Simulator(c, backend=b)
        toks = sim.run(Token(0, (0, 50)), 20)
        got[b] = (toks, sim.memories)
    assert got["c"] == got["python"]
    assert got["c"][1]["m11"] == [(50 + 11) % 256] * 8
