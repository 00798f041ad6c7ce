"""An import that names something other than a regular file (a directory, a device, a FIFO)
is read and refused as what it is, never reported as missing (issue 43, class 7)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[2]
COUNTER = (ROOT / "examples" / "counter" / "counter.hdl").read_text()


def _sim(capfd, src: Path) -> list[str]:
    rc = main(["sim", str(src), "--steps", "2"])
    out = capfd.readouterr()
    return [rc, out.err.strip().splitlines()[0] if rc else out.out]


def test_an_import_of_a_directory(tmp_path, capfd):
    (tmp_path / "d.hdl").mkdir()
    src = tmp_path / "c.hdl"
    src.write_text('import "d.hdl";\n' + COUNTER)
    assert _sim(capfd, src) == [2, f"{src}:1:1: error: cannot read '{tmp_path / 'd.hdl'}' to "
                                   f"import: Is a directory"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_an_import_of_dev_zero(tmp_path, capfd):
    src = tmp_path / "c.hdl"
    src.write_text('import "/dev/zero";\n' + COUNTER)
    rc, first = _sim(capfd, src)
    assert rc == 2 and first.startswith(f"{src}:1:1: error: '/dev/zero' is larger than "
                                        f"8,388,608 bytes, the limit for a .hdl source")


def test_an_import_of_a_fifo_being_written(tmp_path, capfd):
    os.mkfifo(tmp_path / "f.hdl")
    threading.Thread(target=lambda: (tmp_path / "f.hdl").write_text("const X = 1;\n"),
                     daemon=True).start()
    src = tmp_path / "c.hdl"
    src.write_text('import "f.hdl";\n' + COUNTER)
    rc, out = _sim(capfd, src)
    assert rc == 0 and "Count value=2" in out


def test_a_missing_import_is_still_missing(tmp_path, capfd):
    src = tmp_path / "c.hdl"
    src.write_text('import "nowhere.hdl";\n' + COUNTER)
    assert _sim(capfd, src) == [2, f"{src}:1:1: error: cannot find 'nowhere.hdl' to import "
                                   f"(looked relative to the importing file)"]
