"""Standard output that cannot be written (/dev/full: a full disk) is named as standard
output, never as a bare OS reason: exit 1, one line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def calc_elf(tmp_path_factory) -> Path:
    from firmware import toolchain
    out = tmp_path_factory.mktemp("fw") / "calc.elf"
    return toolchain.build(toolchain.shipped_programs()["calc"], out)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("argv", [
    ["sim", str(ROOT / "examples/counter/counter.hdl"), "--steps", "2"],
    ["run", "{ELF}", "--input", "2+3"],
    ["run", "{ELF}", "--inputs", "{IN}"],
])
def test_stdout_on_a_full_device(argv, calc_elf, tmp_path):
    (tmp_path / "in.txt").write_text("1+1\n2*3\n")
    argv = [a.replace("{ELF}", str(calc_elf)).replace("{IN}", str(tmp_path / "in.txt"))
            for a in argv]
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "deltachip", *argv], stdout=full,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        "deltachip: error: standard output: No space left on device"], r.stderr
