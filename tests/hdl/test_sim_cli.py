"""`deltachip sim`: the printed token stream, ROM images, the start token, VCD output and the
exact texts of its errors. Circuits are built by hand (the front end is replaced by a stub),
plus one end-to-end run of examples/counter through the real front end."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from vcd.reader import TokenKind as VT, tokenize

from deltachip.cli import main
from deltachip.commands import sim as sim_cmd
from hdl.ir import Circuit, Field, Memory, NOLOC, Op, Token, TokenKind

ROOT = Path(__file__).resolve().parents[2]


def acc_circuit(with_start: bool = True) -> Circuit:
    """Acc(n: u4, s: s8): s += rom[n] each step, n += 1, log[n] <= s; Done(s: s8) halts
    when n == 5."""
    c = Circuit("Acc", NOLOC)
    c.kinds = [TokenKind("Acc", (Field("n", 4), Field("s", 8, signed=True)), NOLOC),
               TokenKind("Done", (Field("s", 8, signed=True),), NOLOC, halt=True)]
    c.memories["rom"] = Memory("rom", "rom", 8, 4, NOLOC, init=(1, 2, 3, 0xFC))
    c.memories["log"] = Memory("log", "ram", 8, 8, NOLOC)
    n = c.add(Op.TOKEN_FIELD, 4, (), (0, 0), name="n")
    s = c.add(Op.TOKEN_FIELD, 8, (), (0, 1), name="s")
    r = c.add(Op.MEM_READ, 8, (n,), "rom", name="rd.word")
    s2 = c.add(Op.ADD, 8, (s, r), name="sum")
    n2 = c.add(Op.ADD, 4, (n, c.add(Op.CONST, 4, (), 1)), name="n1")
    c.add(Op.MEM_WRITE, 0, (n, s2, c.add(Op.CONST, 1, (), 1)), "log")
    done = c.add(Op.EQ, 1, (n, c.add(Op.CONST, 4, (), 5)), name="done")
    kind = c.add(Op.MUX, 1, (done, c.add(Op.CONST, 1, (), 0), c.add(Op.CONST, 1, (), 1)))
    c.add(Op.TOKEN_OUT, 0, (kind, n2, s2, s))
    c.names = {"n": n, "s": s, "rd.word": r, "sum": s2, "n1": n2, "done": done}
    c.start = Token(0, (0, 0)) if with_start else None
    c.check()
    return c


def cli(monkeypatch, circuit: Circuit, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sim_cmd, "load_circuit", lambda path, top: circuit)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["sim", "acc.hdl", *argv])
    return rc, out.getvalue(), err.getvalue()


STREAM = ["Acc n=0 s=0", "Acc n=1 s=1", "Acc n=2 s=3", "Acc n=3 s=6", "Acc n=4 s=2",
          "Acc n=5 s=2", "Done s=2"]


@pytest.mark.parametrize("engine", ["c", "python"])
def test_prints_stream_until_halt(monkeypatch, engine):
    rc, out, err = cli(monkeypatch, acc_circuit(), "--engine", engine)
    assert (rc, err) == (0, "")
    assert out.splitlines() == STREAM


def test_steps_start_and_rom(monkeypatch, tmp_path):
    rc, out, _ = cli(monkeypatch, acc_circuit(), "--steps", "2")
    assert out.splitlines() == STREAM[:3]
    rc, out, _ = cli(monkeypatch, acc_circuit(), "--steps", "0")
    assert out.splitlines() == STREAM[:1]
    rc, out, _ = cli(monkeypatch, acc_circuit(), "--start", "Acc n=2 s=-3", "--steps", "2")
    assert out.splitlines() == ["Acc n=2 s=-3", "Acc n=3 s=0", "Acc n=4 s=-4"]
    img = tmp_path / "r.hex"
    img.write_text("7f\n01 // wraps to -128\n")
    rc, out, _ = cli(monkeypatch, acc_circuit(), "--rom", f"rom={img}", "--steps", "2")
    assert out.splitlines() == ["Acc n=0 s=0", "Acc n=1 s=127", "Acc n=2 s=-128"]


def test_errors_are_exact(monkeypatch, tmp_path):
    big = tmp_path / "big.hex"
    big.write_text("1\n2\n3\n4\n5\n")
    cases = [
        (acc_circuit(), ["--start", "Acc n=1"],
         "token Acc is missing field s (token Acc(n: u4, s: s8))"),
        (acc_circuit(), ["--start", "Ac n=1 s=2"], "unknown token kind 'Ac' in 'Ac n=1 s=2' "
         "(kinds: Acc, Done)"),
        (acc_circuit(), ["--rom", f"ram={big}"],
         f"--rom ram={big}: circuit 'Acc' has no memory 'ram' (its memories: rom, log)"),
        (acc_circuit(), ["--rom", f"rom={big}"],
         f"{big}: image has 5 words, but 'rom' holds only 4 (u8[4])"),
        (acc_circuit(), ["--rom", "rom"], "--rom expects NAME=FILE, got 'rom'"),
        (acc_circuit(), ["--rom", f"rom={tmp_path / 'nope.hex'}"],
         f"cannot read image for 'rom': {tmp_path / 'nope.hex'}: No such file or directory"),
        (acc_circuit(with_start=False), [], "circuit 'Acc' declares no start token: give one "
         "with --start 'Kind field=value ...'"),
        (acc_circuit(), ["--steps", "-1"], "--steps must be >= 0, got -1"),
    ]
    for circuit, argv, msg in cases:
        rc, out, err = cli(monkeypatch, circuit, *argv)
        assert (rc, out, err) == (2, "", msg + "\n"), argv


def test_image_errors_are_exact(monkeypatch, tmp_path):
    """Regression: a '-1' word used to read as 0x-1, non-UTF-8 text was shown as mojibake, and
    a memory given twice silently took the last image."""
    (tmp_path / "neg.hex").write_text("-1\n")
    (tmp_path / "raw.hex").write_bytes(b"\xff\xfe\n")
    (tmp_path / "ok.hex").write_text("1\n")
    cases = [
        (["--rom", f"rom={tmp_path / 'neg.hex'}"],
         f"{tmp_path / 'neg.hex'}:1: '-1' is not a hexadecimal word"),
        (["--rom", f"rom={tmp_path / 'raw.hex'}"],
         f"{tmp_path / 'raw.hex'} is not a text .hex file (use .bin for raw bytes)"),
        (["--rom", f"rom={tmp_path / 'ok.hex'}", "--rom", f"rom={tmp_path / 'ok.hex'}"],
         f"--rom rom={tmp_path / 'ok.hex'}: memory 'rom' is given twice"),
    ]
    for argv, msg in cases:
        rc, out, err = cli(monkeypatch, acc_circuit(), *argv)
        assert (rc, out, err) == (2, "", msg + "\n"), argv


def test_hex_image_takes_several_words_per_line(monkeypatch, tmp_path):
    """Regression: docs/language.md allows several words on a line; `--rom` used to refuse
    them while a ROM's default image accepted them."""
    img = tmp_path / "r.hex"
    img.write_text("7f 0x01 // two words\n")
    rc, out, _ = cli(monkeypatch, acc_circuit(), "--rom", f"rom={img}", "--steps", "2")
    assert out.splitlines() == ["Acc n=0 s=0", "Acc n=1 s=127", "Acc n=2 s=-128"]


@pytest.mark.parametrize("vcd", ["missing/out.vcd", "."])
def test_unwritable_vcd_is_a_user_error(monkeypatch, tmp_path, vcd):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(monkeypatch, acc_circuit(), "--vcd", vcd)
    why = "No such file or directory" if "/" in vcd else "Is a directory"
    assert (rc, out, err) == (2, "", f"--vcd: cannot write {vcd}: {why}\n")


def test_failed_run_keeps_an_existing_vcd(monkeypatch, tmp_path):
    """Bad options are found before the waveform file is opened: it is left as it was."""
    keep = tmp_path / "keep.vcd"
    keep.write_text("mine\n")
    rc, _, _ = cli(monkeypatch, acc_circuit(), "--start", "Acc n=99 s=0", "--vcd", str(keep))
    assert rc == 2 and keep.read_text() == "mine\n"


def _vcd_values(path: Path) -> dict[str, dict[int, object]]:
    """{scope.name: {time: new value}} from a VCD file, read back with pyvcd's tokenizer."""
    ids, scopes, vals, t = {}, [], {}, 0
    with open(path, "rb") as f:
        for tok in tokenize(f):
            if tok.kind is VT.SCOPE:
                scopes.append(tok.scope.ident)
            elif tok.kind is VT.UPSCOPE:
                scopes.pop()
            elif tok.kind is VT.VAR:
                ids[tok.var.id_code] = ".".join(scopes + [tok.var.reference])
            elif tok.kind is VT.CHANGE_TIME:
                t = tok.time_change
            elif tok.kind is VT.CHANGE_SCALAR:
                vals.setdefault(ids[tok.scalar_change.id_code], {})[t] = \
                    int(tok.scalar_change.value)
            elif tok.kind is VT.CHANGE_VECTOR:
                vals.setdefault(ids[tok.vector_change.id_code], {})[t] = tok.vector_change.value
            elif tok.kind is VT.CHANGE_STRING:
                vals.setdefault(ids[tok.string_change.id_code], {})[t] = tok.string_change.value
    return vals


def test_vcd_has_signals_token_and_writes(monkeypatch, tmp_path):
    path = tmp_path / "run.vcd"
    rc, out, _ = cli(monkeypatch, acc_circuit(), "--vcd", str(path), "--engine", "python")
    assert rc == 0 and out.splitlines() == STREAM
    v = _vcd_values(path)
    # a VCD records changes only
    assert v["Acc.sum"] == {0: 1, 1: 3, 2: 6, 3: 2}
    assert v["Acc.rd.word"][3] == 0xFC and v["Acc.rd.word"][4] == 0    # address 4 >= depth
    assert v["token.kind"][0] == "Acc" and v["token.kind"][6] == "Done"
    assert v["token.Done.s"][6] == 2 and v["token.Acc.s"][6] == 0
    assert v["memory.log.waddr"] == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
    assert v["memory.log.we"] == {0: 1}
    assert "$timescale 1 ns $end" in path.read_text().replace("\n", " ").replace("  ", " ")


def test_counter_example_end_to_end():
    r = subprocess.run([sys.executable, "-m", "deltachip", "sim",
                        str(ROOT / "examples/counter/counter.hdl")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"Count value={i}" for i in range(10)] + ["Done"]


@pytest.mark.parametrize("engine", ["c", "python"])
def test_run_trace_and_write_vcd_match_the_cli(monkeypatch, tmp_path, engine):
    from hdl.sim import Simulator
    from hdl.sim.waveform import write_vcd
    c = acc_circuit()
    sim = Simulator(c, backend=engine)
    toks = sim.run(c.start, 100, trace=True)
    assert len(sim.trace) == len(toks) - 1 == 6
    assert [r.next for r in sim.trace] == toks[1:]
    assert sim.memory("log") == [1, 3, 6, 2, 2, 2, 0, 0]
    write_vcd(tmp_path / "api.vcd", c, toks, sim.trace)
    cli(monkeypatch, c, "--vcd", str(tmp_path / "cli.vcd"), "--engine", engine)
    assert _vcd_values(tmp_path / "api.vcd") == _vcd_values(tmp_path / "cli.vcd")


def test_a_run_that_fails_midway_keeps_the_old_vcd(monkeypatch, tmp_path):
    """The waveform is written to a temporary file and renamed only after the run."""
    from hdl.sim import SimError, Simulator
    keep = tmp_path / "run.vcd"
    keep.write_text("mine\n")
    calls = []

    def failing_step(self, tok, trace=False):
        calls.append(tok)
        raise SimError("boom")
    monkeypatch.setattr(Simulator, "step", failing_step)
    rc, out, err = cli(monkeypatch, acc_circuit(), "--vcd", str(keep))
    assert (rc, out, err) == (2, "Acc n=0 s=0\n", "boom\n") and calls
    assert keep.read_text() == "mine\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.vcd"]


SEMANTICS = """
circuit Sem {
    token Go(t: u3, seen: u8, far: u8, other: u8);
    token Neg(x: s8);
    token End(last: s8) halt;
    start Go(t: 0, seen: 0, far: 0, other: 0);
    ram m: u8[4];
    // step t writes m[0] <= 10 + t, except step 2, which aims at m[4]: out of range, ignored
    let a: u3 = tok.Go.t == 2 ? 3'd4 : 3'd0;
    m[a] <= 8'd10 + zext(tok.Go.t, 8);
    match tok {
        Go => {
            if tok.Go.t == 3 { next = Neg(x: -5); }
            else { next = Go(t: tok.Go.t + 1, seen: m[0], far: m[a], other: unsigned(tok.Neg.x)); }
        }
        Neg => { next = End(last: tok.Neg.x); }
        End => { next = End(last: 0); }
    }
}
"""


@pytest.mark.parametrize("engine", ["c", "python"])
def test_step_semantics_of_docs_language_md(tmp_path, monkeypatch, engine):
    """Through the real front end: a read sees the memory as it was at the start of the step
    (the write of step t shows at t+1), an out-of-range write is ignored and an out-of-range
    read gives 0, another kind's field reads 0, signed fields print signed, and the run stops
    after printing the first halt token."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sem.hdl").write_text(SEMANTICS)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["sim", "sem.hdl", "--engine", engine]) == 0
    assert out.getvalue().splitlines() == [
        "Go t=0 seen=0 far=0 other=0",      # step 0 writes m[0] = 10; not visible yet
        "Go t=1 seen=0 far=0 other=0",
        "Go t=2 seen=10 far=10 other=0",    # step 1 wrote 11, step 2's write is ignored
        "Go t=3 seen=11 far=0 other=0",     # m[4] reads 0
        "Neg x=-5",
        "End last=-5"]


def test_enum_fields_print_and_parse_by_member_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.hdl").write_text("""
        enum Op { ADD, SUB, AND = 5, OR }
        circuit E {
            token T(op: Op, n: u4);
            start T(op: Op.SUB, n: 0);
            var nxt: Op = Op.ADD;
            match tok.T.op { ADD => { nxt = Op.SUB; } SUB => { nxt = Op.OR; } _ => { } }
            next = T(op: nxt, n: tok.T.n + 1);
        }
        """)
    assert main(["sim", "e.hdl", "--steps", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["T op=SUB n=0", "T op=OR n=1", "T op=ADD n=2"]
    assert main(["sim", "e.hdl", "--steps", "1", "--start", "T op=Op.ADD n=3"]) == 0
    assert capsys.readouterr().out.splitlines() == ["T op=ADD n=3", "T op=SUB n=4"]
    assert main(["sim", "e.hdl", "--start", "T op=7 n=0"]) == 2
    assert capsys.readouterr().err == ("field op: '7' is not a member of enum Op "
                                       "(ADD, SUB, AND, OR)\n")
    assert main(["sim", "e.hdl", "--start", "T op=ADD"]) == 2
    assert capsys.readouterr().err == "token T is missing field n (token T(op: Op, n: u4))\n"
