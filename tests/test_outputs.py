"""Every output a command writes (issue 9, classes 1, 4, 5): never through a special file,
an OS error names the path and the reason and leaves nothing behind, SIGTERM cleans up like
Ctrl-C, and what a SIGKILL left is swept by the next run.

The outputs: ``run --stats``, ``run --trace``, ``sim --vcd``, ``firmware build -o``,
``compile -o``, ``compile --plot``. A full disk is real: a tiny tmpfs where this process may
mount one (root), and everywhere a file-size limit (RLIMIT_FSIZE, "File too large"), which
the kernel enforces on the command and on the compiler it starts alike.
"""
from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import outputs
from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter" / "counter.hdl"
GCD = ROOT / "examples" / "gcd" / "gcd.hdl"


@pytest.fixture(scope="module")
def calc_elf(tmp_path_factory) -> Path:
    from firmware import toolchain
    out = tmp_path_factory.mktemp("fw") / "calc.elf"
    return toolchain.build(toolchain.shipped_programs()["calc"], out)


def _outputs(elf: Path) -> dict[str, tuple[list[str], str]]:
    """Each output: (the command writing it to {OUT}, its label in error messages)."""
    return {
        "stats": (["run", str(elf), "--input", "2**10", "--stats", "{OUT}"], "--stats: "),
        "trace": (["run", str(elf), "--input", "2**10", "--trace", "{OUT}"], "--trace: "),
        "vcd": (["sim", str(COUNTER), "--vcd", "{OUT}"], "--vcd: "),
        "elf": (["firmware", "build", "hello", "-o", "{OUT}"], "error: "),
        "plot": (["compile", str(COUNTER), "-o", "{DIR}", "--plot", "{OUT}"], "--plot: "),
    }


def _argv(cmd: list[str], out: Path, tmp: Path) -> list[str]:
    return [a.replace("{OUT}", str(out)).replace("{DIR}", str(tmp / "ck")) for a in cmd]


def _special(kind: str, path: Path, target: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        target.write_text("precious\n")
        path.symlink_to(target)
    elif kind == "chardev":
        try:
            os.mknod(path, 0o644 | 0o020000, os.makedev(1, 3))     # like /dev/null
        except PermissionError:
            pytest.skip("making a character device needs root (the FIFO case covers the path)")


KIND_WORDS = {"fifo": "a named pipe (FIFO)", "symlink": "a symbolic link",
              "chardev": "a character device"}


@pytest.mark.parametrize("kind", ["fifo", "symlink", "chardev"])
@pytest.mark.parametrize("which", ["stats", "trace", "vcd", "elf", "plot"])
def test_special_file_is_never_replaced(which, kind, calc_elf, tmp_path, capfd):
    cmd, label = _outputs(calc_elf)[which]
    out = tmp_path / ("out.png" if which == "plot" else "out")
    target = tmp_path / "target.txt"
    _special(kind, out, target)
    before = os.lstat(out)
    assert main(_argv(cmd, out, tmp_path)) == 2
    assert capfd.readouterr().err == (f"{label}cannot write {out}: it is {KIND_WORDS[kind]}, "
                                      "not a regular file; refusing to replace it\n")
    after = os.lstat(out)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino,
                                                            before.st_rdev)
    if kind == "symlink":
        assert target.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {out.name} | ({target.name} if kind == "symlink" else set()))


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_compile_dir_is_never_a_special_file(kind, tmp_path, capsys):
    out = tmp_path / "ck"
    _special(kind, out, tmp_path / "target")
    assert main(["compile", str(COUNTER), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == ({"fifo": f"-o {out}: exists and is not a directory (compile writes a "
                            "directory: config.json, model.safetensors, chip.json); choose "
                            "another path\n",
                    "symlink": f"-o {out}: is a symbolic link; give the directory itself\n"}[kind])
    assert os.path.lexists(out)


def _limited(limit: int):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def _cli(argv: list[str], **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "deltachip", *argv], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, cwd=ROOT, **kw)


FULL_CASES = {   # output -> (command, label, bytes the file system lets it write)
    "stats": (["run", "{ELF}", "--input", "2**1000", "--stats", "{OUT}"], "--stats: ", 100),
    "trace": (["run", "{ELF}", "--input", "2**1000", "--trace", "{OUT}"], "--trace: ", 4000),
    "vcd": (["sim", str(COUNTER), "--vcd", "{OUT}"], "--vcd: ", 100),
    "elf": (["firmware", "build", "calc", "-o", "{OUT}"], "error: ", 20_000),
    "compile": (["compile", str(COUNTER), "-o", "{OUT}"], "-o ", 20_000),
}


def _full_message(which: str, out: Path, reason: str) -> str:
    label = FULL_CASES[which][1]
    if which == "compile":
        return f"-o {out}: cannot write the checkpoint: {reason} (nothing was changed)\n"
    return f"{label}cannot write {out}: {reason}\n"


@pytest.mark.parametrize("which", sorted(FULL_CASES))
def test_file_too_large_names_path_and_leaves_nothing(which, calc_elf, tmp_path):
    cmd, _label, limit = FULL_CASES[which]
    out = tmp_path / "out"
    argv = [a.replace("{OUT}", str(out)).replace("{ELF}", str(calc_elf)) for a in cmd]
    r = _cli(argv, preexec_fn=_limited(limit))
    assert r.returncode == 2, r.stderr
    assert r.stderr.endswith(_full_message(which, out, "File too large")), r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def full_fs(tmp_path):
    """A 64 KiB tmpfs (root only, where mounting works); unmounted afterwards."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the file-size-limit test "
                    "covers the same paths")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("which", sorted(FULL_CASES))
def test_disk_full_names_path_and_leaves_nothing(which, calc_elf, full_fs):
    cmd = FULL_CASES[which][0]
    if which in ("stats", "vcd"):       # small outputs: fill the disk first
        (full_fs / "filler").write_bytes(b"x" * (64 * 1024 - 4096))
        (full_fs / "filler2").write_bytes(b"x" * 3000)
    out = full_fs / "out"
    argv = [a.replace("{OUT}", str(out)).replace("{ELF}", str(calc_elf)) for a in cmd]
    r = _cli(argv)
    assert r.returncode == 2, r.stderr
    if which == "compile":      # its size is known before it writes: refused up front
        assert re.fullmatch(rf"-o {out}: the checkpoint \(\d[\d,]* bytes of weights\) needs "
                            rf"0\.06 GiB, {full_fs} has 0\.00 GiB free \(nothing was "
                            r"written\)\n", r.stderr.splitlines(True)[-1]), r.stderr
    else:
        assert r.stderr.endswith(_full_message(which, out, "No space left on device")), r.stderr
    assert sorted(p.name for p in full_fs.iterdir() if not p.name.startswith("filler")) == []


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if outputs.TEMP_TAG in p.name)


def test_sigterm_during_compile_removes_the_temporary(tmp_path):
    out = tmp_path / "g"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "deltachip", "compile", str(GCD), "-o",
                             str(out), "--target", "qwen3.5-4b"], env=env, cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not _temps(tmp_path) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert _temps(tmp_path), "the compile never started writing"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err.splitlines()[-1]) == (143, "deltachip: terminated")
    assert list(tmp_path.iterdir()) == []


def test_next_run_sweeps_what_a_killed_run_left(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                         # a pid that no longer runs
    out = tmp_path / "ck"
    stale_dir = tmp_path / f".ck.{outputs.TEMP_TAG}-{dead.pid}-abc123"
    stale_dir.mkdir()
    (stale_dir / "model.safetensors").write_bytes(b"x" * 1000)
    stale_file = tmp_path / f".s.json.{outputs.TEMP_TAG}-{dead.pid}-abc.tmp"
    stale_file.write_text("{")
    live = tmp_path / f".ck.{outputs.TEMP_TAG}-{os.getpid()}-live"     # a running process's
    live.mkdir()
    other = tmp_path / ".ck.someone-else"                               # not our naming
    other.mkdir()
    assert main(["compile", str(COUNTER), "-o", str(out)]) == 0
    assert not stale_dir.exists() and live.exists() and other.exists()
    with outputs.replace_on_success(tmp_path / "s.json") as tmp:
        tmp.write_text("{}")
    assert not stale_file.exists()
    assert (tmp_path / "s.json").read_text() == "{}"
