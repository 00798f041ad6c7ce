"""The command-line driver: every subcommand explains itself, bad usage never shows a traceback."""
import subprocess
import sys

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
