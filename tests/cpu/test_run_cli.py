"""``deltachip run``: stdout carries only UART output, exit statuses, --stats, --trace, errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cpu import isa, memmap
from deltachip.cli import main
from deltachip.commands.run import ENGINES

E = isa.encode


def li(rd: int, value: int) -> list[int]:
    hi = ((value + 0x800) >> 12) & 0xFFFFF
    return [E("lui", rd=rd, imm=hi), E("addi", rd=rd, rs1=rd, imm=isa.sign_extend(value & 0xFFF, 12))]


def program(words: list[int], build_elf, elf_file, symbols=None):
    code = b"".join(w.to_bytes(4, "little") for w in words)
    segs = [(0, code, len(code), 5), (memmap.RAM_BASE, b"", 0x100, 6)]
    return elf_file(build_elf(segs, symbols=symbols))


def say(text: bytes, exit_code: int) -> list[int]:
    words = li(1, memmap.UART_TX)
    for ch in text:
        words += [E("addi", rd=2, imm=ch), E("sb", rs1=1, rs2=2)]
    return words + [E("addi", rd=10, imm=exit_code), E("addi", rd=17, imm=93), E("ecall")]


def test_output_and_exit_status(build_elf, elf_file, capfd):
    path = program(say(b"hi\n", 7), build_elf, elf_file)
    assert main(["run", str(path)]) == 7
    out, err = capfd.readouterr()
    assert (out, err) == ("hi\n", "")


def test_negative_exit_code_is_mod_256(build_elf, elf_file, capfd):
    path = program(say(b"", -1), build_elf, elf_file)
    assert main(["run", str(path)]) == 255


def test_fault_exit_3_message_on_stderr(build_elf, elf_file, capfd):
    path = program(say(b"ok", 0)[:6] + [E("ebreak")], build_elf, elf_file)
    assert main(["run", str(path)]) == 3
    out, err = capfd.readouterr()
    assert out == "ok"
    assert err == ("deltachip run: machine fault at pc 0x00000018, instruction 0x00100073 "
                   "(ebreak): ebreak (after 6 instructions)\n")


def test_step_budget_exit_124(build_elf, elf_file, capfd):
    path = program([E("jal", imm=0)], build_elf, elf_file)
    assert main(["run", str(path), "--max-steps", "1000"]) == 124
    out, err = capfd.readouterr()
    assert out == ""
    assert err == ("deltachip run: step budget exhausted: 1,000 instructions without exit "
                   "(pc 0x00000000); raise --max-steps\n")


def test_stats_and_trace(build_elf, elf_file, tmp_path, capfd):
    path = program(say(b"A", 0), build_elf, elf_file)
    stats, trace = tmp_path / "s.json", tmp_path / "t.txt"
    assert main(["run", str(path), "--stats", str(stats), "--trace", str(trace)]) == 0
    assert capfd.readouterr().out == "A"
    s = json.loads(stats.read_text())
    assert (s["engine"], s["instructions"], s["exit_code"], s["fault"], s["timed_out"]) == \
        ("ref", 7, 0, None, False)
    assert s["seconds"] >= 0
    lines = trace.read_text().splitlines()
    assert len(lines) == 7
    assert lines[0] == "00000000 100000b7 x1=0x10000000 - 00000004"
    assert lines[3] == "0000000c 00208023 - W1[0x10000000]=0x41 00000010"
    assert lines[-1] == "00000018 00000073 - - 0000001c"


def test_trace_spans_chunks(build_elf, elf_file, tmp_path, capfd, monkeypatch):
    import deltachip.commands.run as run_mod
    monkeypatch.setattr(run_mod, "CHUNK_STEPS", 3)
    path = program(say(b"xy", 0), build_elf, elf_file)
    trace = tmp_path / "t.txt"
    assert main(["run", str(path), "--trace", str(trace)]) == 0
    assert capfd.readouterr().out == "xy"
    assert len(trace.read_text().splitlines()) == 9


def test_input_text(build_elf, elf_file, capfd):
    buf = memmap.RAM_BASE + 0x10
    words = li(3, buf) + li(1, memmap.UART_TX) + [
        E("lbu", rd=2, rs1=3), E("beq", rs1=2, rs2=0, imm=16), E("sb", rs1=1, rs2=2),
        E("addi", rd=3, rs1=3, imm=1), E("jal", imm=-16),
        E("addi", rd=17, imm=93), E("ecall")]
    syms = {"__input_buffer": (buf, 0, 2), "__input_size": (64, 0, 0xFFF1)}
    path = program(words, build_elf, elf_file, symbols=syms)
    assert main(["run", str(path), "--input", "2**100"]) == 0
    assert capfd.readouterr().out == "2**100"
    assert main(["run", str(path), "--input", "x" * 64]) == 2
    assert capfd.readouterr().err == ("--input text is 64 bytes; the program's input buffer "
                                      "holds 64 bytes including the terminating NUL\n")


def test_input_without_buffer(build_elf, elf_file, capfd):
    path = program(say(b"", 0), build_elf, elf_file)
    assert main(["run", str(path), "--input", "1"]) == 2
    assert capfd.readouterr().err == (f"{path}: --input given but the program has no input "
                                      "buffer (no symbol __input_buffer in the ELF)\n")


def test_bad_program_file(tmp_path, capfd):
    bad = tmp_path / "x.elf"
    bad.write_text("not an elf")
    assert main(["run", str(bad)]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err == f"{bad}: not an ELF file (bad magic bytes)\n"


def test_engine_registry_and_help(capsys):
    assert "ref" in ENGINES
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--engine {fast,hf,ref,sim}" in text and "golden RV32IM+Zba ISA emulator" in text
    assert {"ref", "sim", "hf", "fast"} <= set(ENGINES) and ENGINES["fast"].compiled
    with pytest.raises(SystemExit) as e:
        main(["run", "x.elf", "--engine", "nope"])
    assert e.value.code == 2


def test_firmware_hello_via_subprocess(firmware_elf):
    """The real CLI process on a compiled program: nothing but the program's text on stdout."""
    path = firmware_elf("hello")
    p = subprocess.run([sys.executable, "-m", "deltachip", "run", str(path)],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(b"Hello from deltachip!\n") and p.stderr == b""


def test_negative_max_steps(build_elf, elf_file, capfd):
    path = program(say(b"", 0), build_elf, elf_file)
    assert main(["run", str(path), "--max-steps", "-1"]) == 2
    assert capfd.readouterr().err == "--max-steps must be >= 0, got -1\n"



def test_zero_max_steps_runs_nothing(build_elf, elf_file, tmp_path, capfd):
    """--max-steps 0 is a budget of nothing: no instruction retires, exit 124, stats say so."""
    path = program(say(b"A", 0), build_elf, elf_file)
    stats, trace = tmp_path / "s.json", tmp_path / "t.txt"
    assert main(["run", str(path), "--max-steps", "0", "--stats", str(stats),
                 "--trace", str(trace)]) == 124
    assert capfd.readouterr() == ("", "deltachip run: step budget exhausted: 0 instructions "
                                      "without exit (pc 0x00000000); raise --max-steps\n")
    s = json.loads(stats.read_text())
    assert (s["instructions"], s["exit_code"], s["exit_status"], s["timed_out"]) == \
        (0, None, 124, True)
    assert trace.read_text() == ""

@pytest.mark.parametrize("text,want", [("2**100", "1267650600228229401496703205376\n"),
                                       ("-7 // 2", "-4\n")])
def test_calc_with_input(firmware_elf, capfd, text, want):
    assert main(["run", str(firmware_elf("calc")), "--input", text]) == 0
    out, err = capfd.readouterr()
    assert (out, err) == (want, "")


@pytest.mark.parametrize("where, why", [("missing/s.json", "No such file or directory"),
                                        (".", "Is a directory")])
def test_unwritable_stats_is_refused_before_the_run(build_elf, elf_file, tmp_path, capfd,
                                                    monkeypatch, where, why):
    """Regression: --stats used to be tried only after the whole run (whose output was
    printed, then exit 2)."""
    monkeypatch.chdir(tmp_path)
    path = program(say(b"A", 0), build_elf, elf_file)
    assert main(["run", str(path), "--stats", where]) == 2
    assert capfd.readouterr() == ("", f"--stats: cannot write {where}: {why}\n")


def test_stats_file_survives_a_refused_run(build_elf, elf_file, tmp_path, capfd):
    path = program(say(b"A", 0), build_elf, elf_file)
    stats = tmp_path / "s.json"
    stats.write_text("mine\n")
    assert main(["run", str(path), "--stats", str(stats), "--trace", str(tmp_path)]) == 2
    assert capfd.readouterr().err == f"--trace: cannot write {tmp_path}: Is a directory\n"
    assert stats.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, "s.json"]


def echo_program(build_elf, elf_file, exit_code: int = 0):
    """Prints its input, then exits with ``exit_code``; the input buffer holds 16 bytes."""
    buf = memmap.RAM_BASE + 0x10
    words = li(3, buf) + li(1, memmap.UART_TX) + [
        E("lbu", rd=2, rs1=3), E("beq", rs1=2, rs2=0, imm=16), E("sb", rs1=1, rs2=2),
        E("addi", rd=3, rs1=3, imm=1), E("jal", imm=-16),
        E("addi", rd=10, imm=exit_code), E("addi", rd=17, imm=93), E("ecall")]
    syms = {"__input_buffer": (buf, 0, 2), "__input_size": (16, 0, 0xFFF1)}
    return program(words, build_elf, elf_file, symbols=syms)


def test_inputs_one_output_line_each(build_elf, elf_file, tmp_path, capfd):
    """--inputs: the program once per line, in order; a newline or backslash the program
    prints is escaped so that every run stays one line."""
    path = echo_program(build_elf, elf_file)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"one\n\ntwo\\x\n")
    stats = tmp_path / "s.json"
    assert main(["run", str(path), "--inputs", str(inputs), "--stats", str(stats)]) == 0
    assert capfd.readouterr() == ("one\n\ntwo\\\\x\n", "")
    s = json.loads(stats.read_text())
    assert (s["inputs"], [r["exit_code"] for r in s["runs"]]) == (3, [0, 0, 0])
    assert s["instructions"] == sum(r["instructions"] for r in s["runs"]) > 0
    calc_like = tmp_path / "nl.txt"
    calc_like.write_bytes(b"a\n")
    assert main(["run", str(path), "--inputs", str(calc_like)]) == 0
    assert capfd.readouterr().out == "a\n"


def test_inputs_status_is_the_first_failure(build_elf, elf_file, tmp_path, capfd):
    path = echo_program(build_elf, elf_file, exit_code=5)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"x\ny\n")
    assert main(["run", str(path), "--inputs", str(inputs), "--max-steps", "7"]) == 124
    out, err = capfd.readouterr()
    assert out == "x\ny\n"
    assert err == "".join(f"deltachip run: {inputs}:{k}: step budget exhausted: 7 instructions "
                          "without exit; raise --max-steps\n" for k in (1, 2))
    assert main(["run", str(path), "--inputs", str(inputs)]) == 5


@pytest.mark.parametrize("content, args, said", [
    (b"", (), "{inputs}: the --inputs file is empty (one input a line)"),
    (b"ok\n" + b"y" * 16 + b"\n", (), "{inputs}:2: --input text is 16 bytes; the program's "
                                      "input buffer holds 16 bytes including the terminating NUL"),
    (b"1\n", ("--input", "2"), "--inputs runs many inputs: it does not combine with --input "
                               "or --trace"),
    (b"1\n", ("--threads", "0"), "--threads applies to --inputs and must be >= 1"),
])
def test_inputs_refused(build_elf, elf_file, tmp_path, capfd, content, args, said):
    path = echo_program(build_elf, elf_file)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(content)
    assert main(["run", str(path), "--inputs", str(inputs), *args]) == 2
    assert capfd.readouterr() == ("", said.format(inputs=inputs) + "\n")


def test_inputs_needs_an_input_buffer(build_elf, elf_file, tmp_path, capfd):
    path = program(say(b"", 0), build_elf, elf_file)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"1\n")
    assert main(["run", str(path), "--inputs", str(inputs)]) == 2
    assert capfd.readouterr().err == (f"{path}: --inputs: the program has no input buffer "
                                      "(__input_buffer)\n")


def test_progress_line_on_request(build_elf, elf_file, capfd, monkeypatch):
    """DELTACHIP_PROGRESS=1 shows the progress line on stderr (as at a terminal) and removes
    it at the end; stdout stays the program's output."""
    import common.progress as progress
    monkeypatch.setenv("DELTACHIP_PROGRESS", "1")
    path = program(say(b"hi", 0), build_elf, elf_file)
    assert main(["run", str(path)]) == 0
    out, err = capfd.readouterr()
    assert out == "hi" and "instructions" in err
    monkeypatch.setenv("DELTACHIP_PROGRESS", "0")
    assert main(["run", str(path)]) == 0
    assert capfd.readouterr() == ("hi", "")
    assert progress.describe({"instructions": 1234, "tokens": 5000}, 2.0) == \
        "1,234 instructions · 5,000 tokens · 2,500 tokens/s"
    assert progress.describe({"instructions": 10, "streams": 4, "done": 1}, 0.0) == \
        "1/4 streams · 10 instructions"
