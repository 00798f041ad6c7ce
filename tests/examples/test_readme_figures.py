"""The example READMEs' "Compile it" transcripts are real: every ``$ deltachip ...`` line of
the block is run (``build/`` becomes a temporary directory, paths are relative to the
repository root) and its stdout must match the lines shown under it, where a line ``...``
stands for any number of lines and ``...`` inside a line for any text. So the figures a
README quotes (layers, hidden size, lanes, positions checked) cannot go stale."""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["counter", "gcd", "stack_machine"]


def transcript(readme: Path) -> list[tuple[list[str], list[str]]]:
    """(argv, expected stdout lines) for each ``$ deltachip`` line of the README's code
    block that compiles the example."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme.read_text(), re.DOTALL)
    block = next(b for b in blocks if "$ deltachip compile" in b)
    out: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ deltachip "):
            out.append((shlex.split(line[len("$ deltachip "):]), []))
        elif out:
            out[-1][1].append(line)
    return out


def pattern(expected: list[str]) -> re.Pattern[str]:
    parts = []
    for line in expected:
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(map(re.escape, line.split("..."))) + r"\n")
    return re.compile("".join(parts))


@pytest.mark.parametrize("name", EXAMPLES)
def test_readme_transcript_is_what_the_commands_print(name, tmp_path):
    steps = transcript(ROOT / "examples" / name / "README.md")
    assert [argv[0] for argv, _ in steps] == ["compile", "check"]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for argv, expected in steps:
            argv = [str(tmp_path / a[len("build/"):]) if a.startswith("build/") else a
                    for a in argv]
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
                status = main(argv)
            assert status == 0, (argv, buf.getvalue())
            assert pattern(expected).fullmatch(buf.getvalue()), \
                f"README of {name} shows:\n" + "\n".join(expected) + \
                f"\n\n`deltachip {' '.join(argv)}` printed:\n{buf.getvalue()}"
    finally:
        os.chdir(cwd)
