"""Mutated sources (tokens dropped, duplicated, swapped, replaced; random bytes) must either
load or raise CompileError: never any other exception, never a traceback for the user."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hdl.diagnostics import CompileError
from hdl.frontend import load_module_source, load_source

ROOT = Path(__file__).parents[2]
SEEDS = sorted([*ROOT.glob("examples/*/*.hdl"), *ROOT.glob("stdlib/*.hdl"),
                *(Path(__file__).parent / "sources").glob("*.hdl")])
TEXTS = {p: p.read_text() for p in SEEDS}
TOKEN = re.compile(r"\s+|//[^\n]*|\d+'[dhbDHB][0-9a-fA-F_]+|0[xXbBoO][0-9a-fA-F_]+|\w+|"
                   r"<<|>>|<=|>=|==|!=|&&|\|\||=>|\.\.|.", re.S)
# tokens worth inserting: keywords, punctuation, edge numbers
VOCAB = ["{", "}", "(", ")", "[", "]", ";", ",", ":", "=", "<=", "=>", ".", "..", "|", "_",
         "?", "wire", "let", "var", "if", "else", "match", "for", "in", "inst", "next", "tok",
         "token", "start", "rom", "ram", "module", "circuit", "const", "enum", "import", "halt",
         "0", "1", "64", "65", "0xFFFFFFFFFFFFFFFFF", "8'hFF", "0'd0", "-1", "x", "u8", "u[0]",
         "s64", "zext", "sext", "trunc", "clog2(0)", "tok.kind", "+", "-", "*", "/", "%", "<<"]


def _tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@st.composite
def mutated(draw):
    path = draw(st.sampled_from(SEEDS))
    toks = _tokens(TEXTS[path])
    for _ in range(draw(st.integers(1, 4))):
        if not toks:
            break
        i = draw(st.integers(0, len(toks) - 1))
        how = draw(st.sampled_from(["drop", "dup", "swap", "insert", "bytes"]))
        if how == "drop":
            del toks[i]
        elif how == "dup":
            toks.insert(i, toks[i])
        elif how == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif how == "insert":
            toks.insert(i, " " + draw(st.sampled_from(VOCAB)) + " ")
        else:
            raw = draw(st.binary(min_size=1, max_size=4))
            toks.insert(i, raw.decode("latin-1"))
    return path, "".join(toks)


def _load(path: Path, text: str) -> None:
    if re.search(r"^\s*circuit\s", TEXTS[path], re.M):
        load_source(text, str(path))
    else:
        names = re.findall(r"module\s+(\w+)", text)
        load_module_source(text, names[0] if names else "m", filename=str(path))


def test_seed_sources_load():
    for path in SEEDS:
        _load(path, TEXTS[path])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(mutated())
def test_mutated_sources_load_or_raise_compile_error(case):
    path, text = case
    try:
        _load(path, text)
    except CompileError as e:
        assert e.diagnostics and str(e)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_sources_many(case):
    test_mutated_sources_load_or_raise_compile_error.hypothesis.inner_test(case)
