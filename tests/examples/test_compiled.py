"""Rung 3 of the verification ladder for the examples: compile each into Qwen3.5 weights
(`deltachip compile`) and run them in transformers against the reference simulator
(`deltachip check`, which compares every position's next token and the memories).
The counter runs by default; the larger examples are marked slow."""
from __future__ import annotations

import pytest

from tests.examples.test_examples import EX, cli


def compile_and_check(tmp_path, name: str, *check_args: str) -> str:
    out = tmp_path / name
    rc, _, err = cli("compile", str(EX / name / f"{name}.hdl"), "-o", str(out))
    assert rc == 0, err
    rc, text, err = cli("check", str(out), *check_args)
    assert rc == 0, text + err
    return text


def test_counter_weights_match_the_simulator(tmp_path):
    text = compile_and_check(tmp_path, "counter")
    assert "OK: 11 positions" in text


@pytest.mark.slow
def test_gcd_weights_match_the_simulator(tmp_path):
    text = compile_and_check(tmp_path, "gcd", "--steps", "20", "--start", "Step a=144 b=233")
    assert "OK: 14 positions" in text


@pytest.mark.slow
def test_stack_machine_weights_match_the_simulator(tmp_path):
    text = compile_and_check(tmp_path, "stack_machine", "--steps", "300", "--prefill")
    assert "OK: 294 positions" in text


def test_stack_machine_cannot_write_a_sum_straight_into_the_stack(tmp_path):
    # The README's reason for the Put token: an ADD that wrote its sum into the stack in the
    # step that reads the stack breaks the depth rule, and the compiler says so.
    src = (EX / "stack_machine" / "stack_machine.hdl").read_text()
    direct = "ADD => { stack[sp - 2] <= second + top; next = Run(pc: pc1, sp: sp - 1); }"
    bad = src.replace("ADD => { next = Put(value: second + top, sp: sp - 1); }", direct)
    assert bad != src
    (tmp_path / "bad.hdl").write_text(bad)
    (tmp_path / "program.hex").write_text((EX / "stack_machine" / "program.hex").read_text())
    rc, _, err = cli("compile", str(tmp_path / "bad.hdl"), "-o", str(tmp_path / "out"))
    assert rc == 2
    assert "error: depth rule: the write to memory 'stack' depends on a read of 'stack'" in err
