"""The command-line driver: every subcommand explains itself, bad usage never shows a traceback."""
import subprocess
import sys
from pathlib import Path

import pytest

from deltachip import cli


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "deltachip", *args], capture_output=True, text=True)


def test_top_level_help_lists_commands():
    r = run_cli("--help")
    assert r.returncode == 0
    for name in cli.COMMANDS:
        assert name in r.stdout


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_each_command_has_help_with_an_example(name):
    r = run_cli(name, "--help")
    assert r.returncode == 0, r.stderr
    assert "example" in r.stdout.lower()
    assert "Traceback" not in r.stderr


def test_no_command_prints_help_and_fails():
    r = run_cli()
    assert r.returncode == 2
    assert "usage" in r.stdout.lower()


def test_every_listed_command_is_installed():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(cli.COMMANDS)


ROOT = Path(cli.__file__).resolve().parents[1]


def _code_blocks(doc: str, lang: str = "") -> list[str]:
    import re
    text = (ROOT / "docs" / doc).read_text()
    return [body for tag, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S) if tag == lang]


def test_firmware_quick_start_runs_as_written(tmp_path):
    """docs/firmware.md's first code block, line by line, in a folder that sees the repo's
    firmware/ (so the outputs land in tmp_path); a trailing `# N` comment on a `run` line
    is its expected output."""
    import shlex
    (tmp_path / "firmware").symlink_to(ROOT / "firmware")
    lines = [ln for ln in _code_blocks("firmware.md")[0].splitlines() if ln.startswith("deltachip ")]
    assert len(lines) >= 4
    for line in lines:
        command, _, comment = line.partition("#")
        argv = shlex.split(command)[1:]
        r = subprocess.run([sys.executable, "-m", "deltachip", *argv], capture_output=True,
                           text=True, cwd=tmp_path)
        assert r.returncode == 0, (line, r.stderr)
        if argv[0] == "run" and comment.strip().isdigit():
            assert r.stdout.strip() == comment.strip(), line


def test_language_and_ir_examples_run_as_written(monkeypatch):
    """The counter example of docs/language.md prints what the text says; docs/ir.md's Python
    block runs."""
    from deltachip.cli import main
    import contextlib
    import io
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["sim", "examples/counter/counter.hdl"]) == 0
    assert out.getvalue().splitlines() == [f"Count value={i}" for i in range(10)] + ["Done"]
    block, = [b for b in _code_blocks("ir.md", "python") if "Simulator" in b]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(compile(block, "docs/ir.md", "exec"), {})
    assert "'Done'" in printed.getvalue()


def test_stdlib_imports_named_in_the_docs_exist():
    import re
    names = re.findall(r"^import (\w+);", (ROOT / "docs" / "language.md").read_text(), re.M)
    assert names
    for name in names:
        assert (ROOT / "stdlib" / f"{name}.hdl").is_file(), name
