"""Every file and stream a user names is read with a bound (common/inputs.py): /dev/zero, an
endless pipe or a huge file is refused with a message (exit 2) after at most its reader's
limit, never read until memory runs out (issue 28, classes 3 and 7).

The probes run the command line in a subprocess whose address space is capped
(RLIMIT_AS), so an unbounded read ends in a MemoryError there instead of taking the
machine down."""
from __future__ import annotations

import io
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from common.inputs import InputTooLarge, read_bounded
from cpu.elf import MAX_ELF_BYTES, read_elf
from hdl.elab.files import MAX_SOURCE_BYTES

ROOT = Path(__file__).resolve().parents[1]
STACK = ROOT / "examples" / "stack_machine" / "stack_machine.hdl"
#: address space of a probe: room for Python, torch and the parser's deep-stack thread
#: (1 GiB of virtual stack), far less than /dev/zero read in full would take
PROBE_AS = 3 << 30

ELF_TOO_LARGE = (f"larger than {MAX_ELF_BYTES:,} bytes, the limit for an ELF file (the memory "
                 "map's 425,984 bytes plus 16 MiB of headers, symbols and debug sections)")
SOURCE_TOO_LARGE = (f"is larger than {MAX_SOURCE_BYTES:,} bytes, the limit for a .hdl source "
                    "(the front end holds about 170 bytes of memory per source byte)")


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (PROBE_AS, PROBE_AS))


def probe(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """``python -m deltachip ARGV`` under :data:`PROBE_AS`; its standard input a pipe from
    ``cat STDIN`` (``cat /dev/zero | deltachip ...``), or nothing."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if stdin is None:
        return subprocess.run([sys.executable, "-m", "deltachip", *argv],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              env=env, cwd=ROOT, preexec_fn=_cap, timeout=300)
    with subprocess.Popen(["cat", stdin], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as cat:
        try:
            return subprocess.run([sys.executable, "-m", "deltachip", *argv], stdin=cat.stdout,
                                  capture_output=True, text=True, env=env, cwd=ROOT,
                                  preexec_fn=_cap, timeout=300)
        finally:
            cat.kill()


# ---- the helper --------------------------------------------------------------------------

def test_read_bounded_reads_up_to_the_limit(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 10)
    assert read_bounded(f, 10, "a test input") == b"x" * 10
    with pytest.raises(InputTooLarge) as e:
        read_bounded(f, 9, "a test input")
    assert str(e.value) == f"{f}: larger than 9 bytes, the limit for a test input"
    assert e.value.problem == "is larger than 9 bytes, the limit for a test input"


def test_read_bounded_stream_reads_at_most_one_byte_past_the_limit():
    stream = io.BytesIO(b"y" * 100)
    with pytest.raises(InputTooLarge) as e:
        read_bounded(stream, 7, "the input")
    assert stream.tell() == 8
    assert str(e.value) == "standard input: larger than 7 bytes, the limit for the input"
    assert read_bounded(io.BytesIO(b"abc"), 3, "the input") == b"abc"


def test_read_bounded_device_and_os_errors(tmp_path):
    with pytest.raises(InputTooLarge):
        read_bounded("/dev/zero", 1 << 16, "a test input")
    with pytest.raises(IsADirectoryError):
        read_bounded(tmp_path, 10, "a test input")
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing", 10, "a test input")


def test_elf_reader_refuses_a_file_past_the_memory_map(tmp_path):
    big = tmp_path / "big.elf"
    with open(big, "wb") as f:
        f.write(b"\x7fELF")
        f.truncate(MAX_ELF_BYTES + 1)           # sparse: no disk used
    with pytest.raises(InputTooLarge) as e:
        read_elf(big)
    assert str(e.value) == f"{big}: {ELF_TOO_LARGE}"


# ---- the command line under a memory cap -------------------------------------------------

def test_run_of_dev_zero_is_refused_under_a_memory_cap():
    r = probe(["run", "/dev/zero"])
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"/dev/zero: {ELF_TOO_LARGE}\n")


@pytest.mark.parametrize("command", [["sim"], ["check-rules"], ["compile", "-o", "{TMP}/out"]])
def test_hdl_commands_on_dev_zero_are_refused_under_a_memory_cap(command, tmp_path):
    argv = [command[0], "/dev/zero", *(a.replace("{TMP}", str(tmp_path)) for a in command[1:])]
    r = probe(argv)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"/dev/zero: error: this file {SOURCE_TOO_LARGE}\n")


def test_rom_image_from_dev_zero_is_refused_under_a_memory_cap():
    r = probe(["sim", str(STACK), "--rom", "prog=/dev/zero"])
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "/dev/zero: image for 'prog' is larger than 66,048 bytes, the limit for a .bin "
               "image of u16[256] (256 words of 2 bytes plus 65,536 bytes)\n")


def test_endless_stdin_is_read_up_to_the_input_buffer(calc_elf):
    """`cat /dev/zero | deltachip run calc.elf`: the program's input buffer (1,024 bytes)
    plus one byte is read, then refused."""
    r = probe(["run", str(calc_elf)], stdin="/dev/zero")
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "standard input is more than 1023 bytes; the program's input buffer holds 1024 "
               "bytes including the terminating NUL\n")


def test_endless_stdin_is_not_read_without_an_input_buffer(tmp_path):
    """`cat /dev/zero | deltachip run ret5.elf`: a program without an input buffer (an ELF
    with no ``__input_buffer`` symbol) reads no input."""
    from tests.cpu.conftest import make_elf
    code = struct.pack("<3I", 0x00500513, 0x05D00893, 0x00000073)   # a0 = 5; a7 = 93; ecall
    elf = tmp_path / "ret5.elf"
    elf.write_bytes(make_elf([(0, code, len(code), 5)]))
    r = probe(["run", str(elf)], stdin="/dev/zero")
    assert (r.returncode, r.stdout, r.stderr) == (5, "", "")


@pytest.fixture(scope="module")
def calc_elf(tmp_path_factory) -> Path:
    from firmware import toolchain
    out = tmp_path_factory.mktemp("fw") / "calc.elf"
    return toolchain.build(toolchain.shipped_programs()["calc"], out)
