"""An output that names one of the command's own inputs is refused before anything runs
(common/clobber.py): `sim --vcd` over the source, `run --stats`/`--trace` over the program,
the --inputs file or into the merged model, `firmware build -o` over a source. Golden
texts; the input is left as it was."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from common.clobber import refuse_inputs_as_outputs
from common.errors import UserError
from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter" / "counter.hdl"


def test_the_same_file_by_its_name_a_link_or_a_folder(tmp_path):
    src = tmp_path / "c.hdl"
    src.write_text("x")
    (tmp_path / "link").symlink_to("c.hdl")
    (tmp_path / "m").mkdir()
    for out, said in [(src, f"it is the source file this command reads"),
                      (tmp_path / "link", "it is the source file this command reads"),
                      (tmp_path / "m" / "new.json",
                       f"it is inside {tmp_path / 'm'}, the model this command reads")]:
        with pytest.raises(UserError) as e:
            refuse_inputs_as_outputs([("--out", out)], [("the source file", src),
                                                       ("the model", tmp_path / "m")])
        assert str(e.value) == f"--out: cannot write {out}: {said}; choose another path"
    # other paths, a missing output, None: nothing to say
    refuse_inputs_as_outputs([("--out", tmp_path / "o.txt"), ("--x", None)],
                             [("the source file", src), ("the model", None)])
    with pytest.raises(UserError, match=r"^--a and --b name the same file"):
        refuse_inputs_as_outputs([("--a", tmp_path / "o"), ("--b", tmp_path / "o")], [])


def _cli(capfd, *argv) -> str:
    assert main([str(a) for a in argv]) == 2
    return capfd.readouterr().err.strip().splitlines()[-1]


def test_sim_vcd_over_the_source_or_a_rom(tmp_path, capfd):
    src = tmp_path / "c.hdl"
    shutil.copy(COUNTER, src)
    before = src.read_bytes()
    assert _cli(capfd, "sim", src, "--steps", "2", "--vcd", src) == (
        f"--vcd: cannot write {src}: it is the source file this command reads; choose "
        f"another path")
    rom = tmp_path / "p.hex"
    rom.write_text("00\n")
    assert _cli(capfd, "sim", src, "--rom", f"prog={rom}", "--vcd", rom) == (
        f"--vcd: cannot write {rom}: it is a --rom image this command reads; choose "
        f"another path")
    assert src.read_bytes() == before and rom.read_text() == "00\n"


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    from firmware import toolchain
    d = tmp_path_factory.mktemp("calc")
    return toolchain.build(toolchain.shipped_programs()["calc"], d / "calc.elf")


def test_run_stats_and_trace_over_an_input(calc, tmp_path, capfd):
    prog = tmp_path / "p.elf"
    shutil.copy(calc, prog)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"1+1\n")
    elf = prog.read_bytes()
    assert _cli(capfd, "run", prog, "--input", "1", "--stats", prog) == (
        f"--stats: cannot write {prog}: it is the program this command reads; choose "
        f"another path")
    assert _cli(capfd, "run", prog, "--input", "1", "--trace", prog) == (
        f"--trace: cannot write {prog}: it is the program this command reads; choose "
        f"another path")
    assert _cli(capfd, "run", prog, "--inputs", inputs, "--stats", inputs) == (
        f"--stats: cannot write {inputs}: it is the --inputs file this command reads; "
        f"choose another path")
    model = tmp_path / "merged"
    model.mkdir()
    assert _cli(capfd, "run", prog, "--engine", "fast", "--model", model, "--input", "1",
                "--stats", model / "config.json") == (
        f"--stats: cannot write {model / 'config.json'}: it is inside {model}, the merged "
        f"model this command reads; choose another path")
    out = tmp_path / "s.json"
    assert _cli(capfd, "run", prog, "--input", "1", "--stats", out, "--trace", out) == (
        f"--stats and --trace name the same file ({out}): give each its own path")
    assert prog.read_bytes() == elf and inputs.read_bytes() == b"1+1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "merged", "p.elf"]


def test_firmware_build_over_a_source(tmp_path, capfd):
    src = tmp_path / "m.c"
    src.write_text("int main(void) { return 0; }\n")
    assert _cli(capfd, "firmware", "build", src, "-o", src) == (
        f"-o: cannot write {src}: it is a source file this command reads; choose another "
        f"path")
    assert src.read_text() == "int main(void) { return 0; }\n"
