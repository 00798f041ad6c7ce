"""The compile rules on the language page (docs/language.md, "Compile rules"), from HDL
source: each case of the depth rule and its fix, the vocabulary limits (a u32 field is a
located error, never a 550 GB allocation), `deltachip check-rules` and the `sim` warning;
golden texts."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends.compile.rules import MAX_VOCAB
from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[3]

WRITE_FROM_READ = """circuit Acc {
    token Add(a: u4, v: u8);
    token Done halt;
    start Add(a: 1, v: 5);
    ram mem: u8[16];
    let old = mem[tok.Add.a];
    mem[tok.Add.a] <= old + tok.Add.v;
    next = Done();
}
"""
# the fix: carry the sum in the next token, write it from there
WRITE_FROM_READ_FIXED = """circuit Acc {
    token Add(a: u4, v: u8);
    token Put(a: u4, v: u8);
    token Done halt;
    start Add(a: 1, v: 5);
    ram mem: u8[16];
    match tok {
        Add => { next = Put(a: tok.Add.a, v: mem[tok.Add.a] + tok.Add.v); }
        Put => { mem[tok.Put.a] <= tok.Put.v; next = Done(); }
        Done => { next = Done(); }
    }
}
"""
ADDRESS_FROM_READ = """circuit Chase {
    token Go(a: u4);
    token Done(v: u4) halt;
    start Go(a: 0);
    ram link: u4[16];
    next = Done(v: link[link[tok.Go.a]]);
}
"""
# the fix: one hop per step, the address carried in the token
ADDRESS_FROM_READ_FIXED = """circuit Chase {
    token Go(a: u4);
    token Hop(a: u4);
    token Done(v: u4) halt;
    start Go(a: 0);
    ram link: u4[16];
    match tok {
        Go => { next = Hop(a: link[tok.Go.a]); }
        Hop => { next = Done(v: link[tok.Hop.a]); }
        Done => { next = Done(v: 0); }
    }
}
"""
CYCLE = """circuit Ping {
    token T(a: u4);
    token Done halt;
    start T(a: 0);
    ram x: u4[16];
    ram y: u4[16];
    x[tok.T.a] <= y[tok.T.a];
    y[tok.T.a] <= x[tok.T.a];
    next = Done();
}
"""
# the fix: one memory's write goes through the token
CYCLE_FIXED = """circuit Ping {
    token T(a: u4);
    token Back(a: u4, v: u4);
    token Done halt;
    start T(a: 0);
    ram x: u4[16];
    ram y: u4[16];
    match tok {
        T => { x[tok.T.a] <= y[tok.T.a]; next = Back(a: tok.T.a, v: x[tok.T.a]); }
        Back => { y[tok.Back.a] <= tok.Back.v; next = Done(); }
        Done => { next = Done(); }
    }
}
"""
FIX = ("note: fix: compute the value at this step, carry it in a field of the next token, "
       "and write the memory from that token at the next step")


def _write(tmp_path: Path, text: str, name: str = "c.hdl") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, first", [
    (WRITE_FROM_READ, "c.hdl:6:15: error: depth rule: the write to memory 'mem' depends on a "
                      "read of 'mem' in the same step, through signal 'old'"),
    (ADDRESS_FROM_READ, "c.hdl:6:25: error: depth rule: the read address of memory 'link' "
                        "depends on a read of 'link' in the same step"),
    (CYCLE, "c.hdl:8:19: error: depth rule: memories x -> y -> x read each other in the same "
            "step"),
])
def test_each_depth_rule_case_is_refused_with_its_fix(tmp_path, capsys, text, first):
    p = _write(tmp_path, text)
    assert main(["check-rules", str(p)]) == 2
    err = capsys.readouterr().err
    head = err.splitlines()[0].replace(str(tmp_path) + "/", "")
    assert head.startswith(first), head
    assert FIX in err


@pytest.mark.parametrize("text", [WRITE_FROM_READ_FIXED, ADDRESS_FROM_READ_FIXED, CYCLE_FIXED])
def test_each_fix_compiles(tmp_path, capsys, text):
    p = _write(tmp_path, text)
    assert main(["check-rules", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{p}: circuit ") and " follows every compile rule (compact, bf16: " in out


def test_check_rules_golden_line(capsys):
    gcd = ROOT / "examples" / "gcd" / "gcd.hdl"
    assert main(["check-rules", str(gcd)]) == 0
    assert capsys.readouterr().out == (f"{gcd}: circuit Gcd follows every compile rule "
                                       "(compact, bf16: 24 layers, hidden 64, vocabulary 65,792, "
                                       "0 memories)\n")


def test_sim_warns_when_compile_would_refuse(tmp_path, capsys):
    p = _write(tmp_path, WRITE_FROM_READ)
    assert main(["sim", str(p)]) == 0
    out, err = capsys.readouterr()
    assert out == "Add a=1 v=5\nDone\n"
    assert err.startswith(f"deltachip sim: warning: this circuit simulates, but `deltachip "
                          f"compile` refuses it (`deltachip check-rules {p}` checks every "
                          f"rule):\n{p}:6:15: error: depth rule: the write to memory 'mem'")


def test_sim_of_a_good_circuit_says_nothing(tmp_path, capsys):
    assert main(["sim", str(_write(tmp_path, WRITE_FROM_READ_FIXED))]) == 0
    assert capsys.readouterr().err == ""


WIDE = """circuit Wide {
    token Small(v: u8);
    token Big(x: u32) halt;
    start Small(v: 0);
    next = Big(x: 7);
}
"""


def test_u32_field_is_a_located_error_with_the_limit(tmp_path, capsys):
    p = _write(tmp_path, WIDE)
    for cmd in (["check-rules", str(p)], ["compile", str(p), "-o", str(tmp_path / "out")]):
        assert main(cmd) == 2
        assert capsys.readouterr().err == (
            f"{p}:3:5: error: token kind 'Big' takes the vocabulary past {MAX_VOCAB:,} (2^24) "
            "ids: its payload (x: u32) is 32 bits, 2^32 ids; every possible token is a row of "
            "the embedding and lm_head: narrow the fields, or carry a wide value in two tokens\n"
            "    token Big(x: u32) halt;\n    ^\n")
    assert not (tmp_path / "out").exists()


def test_many_kinds_together_cross_the_limit(tmp_path, capsys):
    kinds = "\n".join(f"    token K{i}(v: u[23]);" for i in range(3))
    p = _write(tmp_path, "circuit Many {\n" + kinds + "\n    token H halt;\n    start K0(v: 0);\n"
                         "    next = H();\n}\n")
    assert main(["check-rules", str(p)]) == 2
    assert capsys.readouterr().err.startswith(
        f"{p}:4:5: error: token kind 'K2' takes the vocabulary past 16,777,216 (2^24) ids: its "
        "payload (v: u23) is 23 bits")


def test_token_tables_too_big_for_the_target(tmp_path, capsys):
    """A 24-bit payload fits the vocabulary, but with a multiplier's lanes (hidden 320) its
    embedding and lm_head would take 20 GiB: refused before anything is allocated."""
    p = _write(tmp_path, "circuit Tall {\n    token A(x: u24) halt;\n    start A(x: 0);\n"
                         "    next = A(x: tok.A.x * tok.A.x);\n}\n")
    assert main(["check-rules", str(p), "--target", "qwen3.5-4b"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{p}:2:5: error: the token tables would take 20.0 GiB (embedding and lm_head: "
        "16,777,216 ids x hidden 320 in bf16), more than 8 GiB; token kind 'A' has the widest "
        "payload (24 bits): narrow it, or carry a wide value in two tokens")
