"""The exactness proof returns a record (``backends.compile.exact.Proof``): its figures are the worst
cases of the program it proved, chip.json keeps them, ``deltachip compile`` prints them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.backends import circuits  # noqa: E402

from backends.compile import emit, exact  # noqa: E402
from backends.chipdir.chipschema import SchemaError, check_chip  # noqa: E402
from backends.compile.pipeline import compile_circuit, plan_circuit  # noqa: E402
from backends.chipdir.numbers import sig_bits  # noqa: E402
from deltachip.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def test_dominance_is_the_largest_exponent():
    for ballast, signal in [(1, 1), (7, 1), (8, 1), (9, 1), (1 << 30, 3), (5, 5), (3, 7),
                            (1, 8), (1, 9), (100, 1 << 20)]:
        e = exact._dominance(ballast, signal)
        # ballast >= 2^e * signal, and not for e + 1
        assert ballast * 2 ** max(-e, 0) >= signal * 2 ** max(e, 0), (ballast, signal, e)
        assert ballast * 2 ** max(-e - 1, 0) < signal * 2 ** max(e + 1, 0), (ballast, signal, e)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("build", [lambda: circuits.counter(8, 9), circuits.ram_circuit,
                                   circuits.rom_circuit], ids=["counter", "ram", "rom"])
def test_proof_figures_are_the_programs_worst_cases(build, dtype):
    em = plan_circuit(build(), dtype=dtype)
    prog, num, pf = em.prog, em.num, em.proof
    gates = [n.gate for ns in prog.mlp.values() for n in ns]
    assert pf.neurons == len(gates)
    assert pf.max_pre == max([0] + [T.hi for T in gates])
    assert pf.min_pre == min([0] + [T.lo for T in gates])
    assert pf.max_weight_bits == max([0] + [sig_bits(w) for T in gates
                                            for w in list(T.t.values()) + [T.c]])
    assert pf.max_lane == max(max(abs(ln.lo), abs(ln.hi)) for ln in prog.lanes)
    need = 24 if dtype == "fp32" else 9
    assert pf.need_bits == need
    ballast = num.n_b * 4 ** num.b_res
    sumsq = max(prog.dim_sumsq(), 1)
    assert ballast >= 2 ** pf.ballast_bits * sumsq > ballast // 2
    assert pf.ballast_bits >= need and pf.mean_square_bits >= 4
    assert {m.memory for m in pf.memories} == set(prog.mems)
    for m in pf.memories:
        row = prog.target.cols_per_bank * m.cell_max ** 2
        assert num.n_bv * 4 ** num.b_v >= 2 ** m.margin_bits * row > num.n_bv * 4 ** num.b_v // 2
        assert m.margin_bits >= need
    # the record is what chip.json keeps, and it passes the schema
    comp = compile_circuit(build(), dtype=dtype)
    assert comp.chip["proof"] == json.loads(json.dumps(pf.record()))
    check_chip(json.loads(json.dumps(comp.chip)))


def test_a_broken_proof_section_is_named():
    comp = compile_circuit(circuits.counter(8, 9))
    chip = json.loads(json.dumps(comp.chip))
    chip["proof"]["ballast_bits"] = "26"
    with pytest.raises(SchemaError, match="proof.ballast_bits"):
        check_chip(chip)
    del chip["proof"]                       # a chip.json from before the section: still valid
    check_chip(chip)


def test_compile_prints_the_proof(tmp_path, capsys):
    out = tmp_path / "stack"
    src = ROOT / "examples" / "stack_machine" / "stack_machine.hdl"
    assert main(["compile", str(src), "-o", str(out), "--dtype", "fp32"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("proof "))
    pf = json.loads((out / "chip.json").read_text())["proof"]
    low = min(m["margin_bits"] for m in pf["memories"].values())
    assert line == (f"proof (fp32): lanes |v| <= {pf['max_lane']}, pre-activations "
                    f"[{pf['min_pre']}, {pf['max_pre']}], weights <= {pf['max_weight_bits']} "
                    f"significant bits, ballast 2^{pf['ballast_bits']} (needs 2^24), value "
                    f"ballast >= 2^{low} (4 memories), eps {pf['rms_eps']:g} vanishes")


def test_a_failed_proof_is_an_error_not_a_record():
    em = plan_circuit(circuits.counter(8, 9))
    bad = emit.Numerics(**{**em.num.__dict__, "b_res": 1})
    with pytest.raises(exact.ExactnessError, match="does not dominate"):
        exact.prove(em.prog, bad, "fp32")
