"""A second `deltachip run --engine fast` in two seconds (issue 41), its checks intact.

What a run of the compiled core no longer does on every start, and what stands in for it:
the compiler's source files (for the core hash) found from a record that holds only while
every file it read has the same bytes and every path it asked about the same answer (else
named on stderr and found again); the core's HDL elaborated only when a token is named in
an error; chip.json read from the cache entry's run record; the ROM images' state made in
numpy, bit for bit the compiler's; the program's images made faster, word for word the
same; and neither torch nor transformers, networkx or lark imported by the run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backends.chipdir.checkpoint import load_chip_json
from cpu import isa, memmap
from cpu.emulator import Machine
from cpu.rv32 import build, engines
from cpu.rv32.build import FULL
from cpu.rv32.loader import PREDECODED, image_of, load_program, predecode
from firmware import toolchain
from tests.backends.engines.test_fast_records import _random_images, assert_rom_states_equal

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkpoint():
    return engines.compiled_core(FULL, "compact", "bf16")


# ---- the program's images ---------------------------------------------------------------------

def _reference_image(machine: Machine) -> dict[str, list[int]]:
    """The loader's images as it made them before (every word decoded, one at a time)."""
    mem = machine.mem

    def words(b: bytes) -> list[int]:
        return [int.from_bytes(b[i:i + 4], "little") for i in range(0, len(b), 4)]
    code = words(mem[memmap.CODE_BASE:memmap.CODE_END])[:FULL.code_words]
    decoded = [predecode(w, 4 * i) for i, w in enumerate(code)]
    images = {name: [d[name] for d in decoded] for name in PREDECODED}
    images |= {"rawcode": code,
               "rodata": words(mem[memmap.RODATA_BASE:memmap.RODATA_END])[:FULL.rodata_words],
               "rhi": [r >> 13 for r in machine.regs] + [0] * 32,
               "rlo": [r & 0x1FFF for r in machine.regs] + [0] * 32,
               "ramw": words(bytes(mem[memmap.RAM_BASE:memmap.RAM_END]))[:FULL.ram_words]}
    return images


@pytest.mark.parametrize("name,text", [("product", None), ("calc", b"2**100"),
                                       ("sieve", None), ("hello", None)])
def test_the_images_are_the_ones_made_word_by_word(firmware_elf, name, text):
    elf = firmware_elf(name)
    got = load_program(elf, text)
    want = _reference_image(Machine.from_elf(elf, text))
    assert got.images.keys() == want.keys()
    for k in want:
        assert got.images[k] == want[k], k
        assert all(type(w) is int for w in got.images[k]), k


def test_a_zero_word_decodes_alike_everywhere():
    zero = predecode(0, 0)
    assert zero["code"] & 0x3F == __import__("cpu.rv32.build", fromlist=["op_codes"]) \
        .op_codes()["OP_ILLEGAL"]
    for pc in (4, 0x100, 4 * (FULL.code_words - 1)):
        assert predecode(0, pc) == zero


# ---- the compiler's source files --------------------------------------------------------------

@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A copy of the compiler's packages as build.py's checkout, and a fresh cache."""
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "checkout"
    for pkg in ("backends", "hdl", "common"):
        shutil.copytree(ROOT / pkg, root / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    monkeypatch.setattr(build, "_ROOT", root)
    build.compiler_files.cache_clear()
    yield root
    build.compiler_files.cache_clear()


def _found(root: Path) -> list[str]:
    build.compiler_files.cache_clear()
    return [str(f.relative_to(root)) for f in build.compiler_files()]


def _fresh(root: Path) -> list[str]:
    return [str(f.relative_to(root)) for f in build._closure()[0]]


def test_the_found_files_are_those_of_a_fresh_search():
    build.compiler_files.cache_clear()
    assert build.compiler_files() == build._closure()[0]
    names = [str(f.relative_to(ROOT)) for f in build.compiler_files()]
    assert "backends/compile/pipeline.py" in names and "hdl/grammar.lark" in names
    assert "backends/engines/hf.py" not in names and "backends/engines/base.py" not in names


def test_the_record_is_used_while_every_fact_holds(checkout, capfd, monkeypatch):
    want = _fresh(checkout)
    assert _found(checkout) == want
    assert capfd.readouterr().err == ""                  # the first: nothing to say
    record = build.closure_record()
    assert record.is_file() and record.parent.name == "records"
    monkeypatch.setattr(build, "_closure", lambda: pytest.fail("searched again"))
    assert _found(checkout) == want
    assert capfd.readouterr().err == ""


def _stale(capfd, record: Path, why: str) -> None:
    assert capfd.readouterr().err == (f"deltachip: the record of the compiler's source files "
                                      f"at {record} is stale ({why}); making it again\n")


def test_a_changed_file_makes_the_record_stale(checkout, capfd):
    _found(checkout)
    record = build.closure_record()
    f = checkout / "backends" / "compile" / "lanes.py"
    f.write_text(f.read_text() + "\n# a comment\n")
    assert _found(checkout) == _fresh(checkout)
    _stale(capfd, record, "backends/compile/lanes.py changed")
    # a new import of a new module: found, and the hash follows it
    (checkout / "backends" / "newmod.py").write_text("X = 1\n")
    f.write_text(f.read_text() + "import backends.newmod\n")
    got = _found(checkout)
    _stale(capfd, record, "backends/compile/lanes.py changed")
    assert "backends/newmod.py" in got and got == _fresh(checkout)
    assert _found(checkout) == got and capfd.readouterr().err == ""


def test_a_file_that_appears_or_goes_makes_the_record_stale(checkout, capfd):
    _found(checkout)
    record = build.closure_record()
    body = json.loads(json.loads(record.read_text())["body"])
    # a path asked about that was no file: made one (a module that now exists)
    absent = sorted(p for p, was in body["asked"].items()
                    if not was and (checkout / p).parent.is_dir())[0]
    (checkout / absent).write_text("")
    got = _found(checkout)
    assert got == _fresh(checkout)
    _stale(capfd, record, f"{absent} appeared")
    (checkout / absent).unlink()
    assert _found(checkout) == _fresh(checkout)
    # a file the search read (it is one of the files now) cannot be read; else it is gone
    _stale(capfd, record, f"{absent} {'cannot be read' if absent in got else 'is gone'}")
    # a grammar beside the others
    (checkout / "hdl" / "extra.lark").write_text("")
    got = _found(checkout)
    _stale(capfd, record, "the grammars in hdl changed")
    assert "hdl/extra.lark" in got and got == _fresh(checkout)


def test_a_damaged_record_is_named_and_made_again(checkout, capfd):
    want = _found(checkout)
    record = build.closure_record()
    record.write_text(record.read_text()[:-40])
    assert _found(checkout) == want
    err = capfd.readouterr().err
    assert err.startswith(f"deltachip: the record of the compiler's source files at {record} "
                          "is damaged (not JSON: ")
    assert _found(checkout) == want and capfd.readouterr().err == ""


def test_the_core_hash_is_the_same_from_the_record():
    build.compiler_files.cache_clear()
    from_record = build.core_hash(FULL)
    build.compiler_files.cache_clear()
    files = build._closure()[0]
    import hashlib
    h = hashlib.sha256(FULL.name.encode())
    for f in (sorted(build.CORE_DIR.glob("*.hdl")) + sorted(build._STDLIB.glob("*.hdl"))
              + files):
        h.update(str(f.relative_to(build._ROOT)).encode() + b"\0" + f.read_bytes())
    assert from_record == h.hexdigest()[:16]


# ---- the run itself ---------------------------------------------------------------------------

def test_the_rom_state_in_numpy_is_the_compilers_on_the_core(checkpoint, firmware_elf):
    chip = load_chip_json(checkpoint)
    image = load_program(firmware_elf("product"), None)
    assert assert_rom_states_equal(chip, {**chip["roms"], **image.images}) > 100
    assert assert_rom_states_equal(chip, _random_images(chip, 3)) > 100


def test_a_fast_run_keeps_chip_json_in_its_entry_and_elaborates_nothing(checkpoint,
                                                                         firmware_elf,
                                                                         monkeypatch):
    elf = firmware_elf("calc")
    monkeypatch.setattr(engines, "load_core",
                        lambda sizes: pytest.fail("the core's HDL elaborated for a fast run"))
    core = engines.fast_engine(elf, b"2**100")
    assert core.entry == checkpoint and (checkpoint / engines.RUN_CHIP).is_file()
    assert "lanemap" not in core.hf.chip
    got = core.run(10**7)
    want = Machine.from_elf(elf, b"2**100").run(10**7)
    assert (got.exit_code, got.output, got.instructions) == (want.exit_code, want.output,
                                                             want.instructions)
    monkeypatch.undo()
    # the same tokens as elaborated (a source location names the checkout that compiled the
    # cached core, which another checkout sharing the cache may have done)
    def tokens(c):
        return [(k.name, k.fields, k.halt) for k in c.kinds]
    assert tokens(core.circuit) == tokens(core.hf.circuit)


def test_a_fast_run_imports_no_heavy_module(checkpoint, firmware_elf):
    """``deltachip run --engine fast`` in a new process: the program's output, and none of
    torch, transformers, networkx, lark imported."""
    elf = firmware_elf("product")
    code = ("import sys, runpy\n"
            "sys.argv = ['deltachip', 'run', sys.argv[1], '--engine', 'fast']\n"
            "try:\n"
            "    runpy.run_module('deltachip', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "heavy = [m for m in ('torch', 'transformers', 'networkx', 'lark') "
            "if m in sys.modules]\n"
            "print('heavy:', heavy, file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, str(elf)], capture_output=True,
                          cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == Machine.from_elf(elf).run(10**7).output
    assert proc.stderr.decode().splitlines()[-1] == "heavy: []"
