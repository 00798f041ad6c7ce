"""Long circuits (issue 28, class 8): a chain of thousands of dependent operations, or one
sum of thousands of terms, compiles like a short one. The back end's passes over the IR are
iterative: a chain of adds is summed without recursing down it, a chain of NOTs of a pending
function never nests calls, a column taller than one neuron's span is summed in groups, and
a NOT that would widen a threshold past one neuron's span is materialised first.

The default run checks 5,000-node chains (and a 2,000-term sum) against every compile rule
and smaller ones of each shape against the simulator in transformers; the slow run takes the
100,000-node chains through every rule (the figures: docs/backend.md, "Long circuits")."""
from __future__ import annotations

import pytest

import deltachip
from backends.compile.pipeline import check_rules
from hdl.frontend import load_source

#: one line of each chain: x{i} from x{i-1} (u8, from a RAM read) or b{i} from b{i-1} (u1)
STEPS = {
    "add": "let x{i}: u8 = x{p} + {c};",                # one chain of absorbed adds
    "sub": "let x{i}: u8 = x{p} - tok.T.v;",            # the same, every term negative
    "not": "let b{i}: u1 = ~b{p};",                    # NOT of NOT of ... a pending compare
    "nand": "let b{i}: u1 = ~(b{p} & r[{k}]);",         # thresholds fused, then materialised
}


def chain(shape: str, n: int) -> str:
    """A circuit whose next token depends on a chain of ``n`` operations of ``shape``,
    starting from a RAM read (so nothing comes from a token table)."""
    lines = ["circuit Chain {", "  token T(v: u8);", "  start T(v: 3);", "  ram m: u8[4];",
             "  m[tok.T.v[1:0]] <= tok.T.v + 1;", "  let r = m[tok.T.v[3:2]];",
             "  let x0: u8 = r;", "  let b0: u1 = r == tok.T.v;"]
    lines += ["  " + STEPS[shape].format(i=i, p=i - 1, c=i % 7 + 1, k=i % 8)
              for i in range(1, n + 1)]
    last = f"x{n}" if shape in ("add", "sub") else f"r + zext(b{n}, 8)"
    lines += [f"  next = T(v: {last});", "}"]
    return "\n".join(lines) + "\n"


def wide_sum(n: int) -> str:
    """One expression summing ``n`` terms (a RAM read and the token's field, alternately)."""
    terms = " + ".join("r" if i % 2 else "tok.T.v" for i in range(n))
    return ("circuit Sum { token T(v: u8); start T(v: 3); ram m: u8[4]; "
            "m[tok.T.v[1:0]] <= tok.T.v + 1; let r = m[tok.T.v[3:2]]; "
            f"next = T(v: {terms}); }}\n")


@pytest.mark.parametrize("shape", sorted(STEPS))
def test_5000_node_chains_follow_every_rule(shape):
    """Used to die with RecursionError in backends/compile/lower/ (add, sub: 1,000 lines; not: a
    NOT of a NOT nested a call per line) or an "internal" pre-activation error (sub, nand)."""
    c = load_source(chain(shape, 5000), f"{shape}.hdl")
    assert len(c.nodes) > 5000
    rep = check_rules(c)
    assert rep.layers >= 1


def test_2000_term_sum_follows_every_rule():
    """One 2,000-term sum: used to die with RecursionError, then with a column of 2,000
    bits as one neuron's pre-activation range [0, 2000]."""
    rep = check_rules(load_source(wide_sum(2000), "sum.hdl"))
    assert rep.layers >= 1


@pytest.mark.parametrize("source", [chain("nand", 40), chain("sub", 300), chain("not", 60),
                                    wide_sum(600)], ids=["nand40", "sub300", "not60", "sum600"])
def test_long_shapes_run_exactly_in_transformers(source, tmp_path):
    """Each new path (a materialised NAND, columns summed in groups, a NOT of a NOT) gives
    the simulator's tokens and memories at every position."""
    chip = deltachip.compile(deltachip.load_source(source, "long.hdl"))
    chip.save(tmp_path / "chip")
    report = deltachip.check(tmp_path / "chip", steps=24)
    assert report.ok, report


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["add", "not"])
def test_100k_node_chains_follow_every_rule(shape):
    """100,000 lines (measured: add 41 s, 0.79 GB peak; not 50 s, 0.71 GB, for
    `deltachip check-rules` on the 2-core machine)."""
    c = load_source(chain(shape, 100_000), f"{shape}.hdl")
    assert len(c.nodes) > 100_000
    assert check_rules(c).layers >= 1
