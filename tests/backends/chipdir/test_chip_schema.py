"""A damaged or hand-edited chip.json is one clear line naming the field, never a traceback
(issue 9, class 3); golden texts."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from backends.chipdir.checkpoint import RECOMPILE
from deltachip.cli import main

ROOT = Path(__file__).resolve().parents[3]
STACK = ROOT / "examples" / "stack_machine" / "stack_machine.hdl"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ck") / "stack"
    assert main(["compile", str(STACK), "-o", str(out)]) == 0
    return out


def _set(obj, path: list, value):
    for key in path[:-1]:
        obj = obj[key]
    if value is DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


DELETE = object()

CASES = [
    # (path, new value, the message's middle)
    ([], [1, 2], "not a deltachip chip file (the JSON is not an object)"),
    ([], None, "not a deltachip chip file (the JSON is not an object)"),
    (["format"], None, "not a deltachip chip file (format None)"),
    (["format_version"], "2", f"corrupt (field 'format_version' must be an integer, got \"2\"): {RECOMPILE}"),
    (["format_version"], None, f"corrupt (field 'format_version' must be an integer, got null): {RECOMPILE}"),
    (["format_version"], True, f"corrupt (field 'format_version' must be an integer, got true): {RECOMPILE}"),
    (["format_version"], 1, f"chip format version 1, but this deltachip reads version 2: {RECOMPILE}"),
    (["dtype"], None, f"corrupt (field 'dtype' must be one of \"bf16\", \"fp32\", got null): {RECOMPILE}"),
    (["target"], [], f"corrupt (field 'target' must be an object, got []): {RECOMPILE}"),
    (["target", "d_k"], "64", f"corrupt (field 'target.d_k' must be an integer >= 0, got \"64\"): {RECOMPILE}"),
    (["numerics"], None, f"corrupt (field 'numerics' must be an object, got null): {RECOMPILE}"),
    (["numerics", "hidden"], 1.5, f"corrupt (field 'numerics.hidden' must be an integer, got 1.5): {RECOMPILE}"),
    (["tokens", "kinds", 0, "halt"], "no", f"corrupt (field 'tokens.kinds[0].halt' must be true or false, got \"no\"): {RECOMPILE}"),
    (["memories"], [], f"corrupt (field 'memories' must be an object, got []): {RECOMPILE}"),
    (["memories", "stack", "banks", 0], None, f"corrupt (field 'memories.stack.banks[0]' must be an array of 2 items, got null): {RECOMPILE}"),
    (["memories", "stack", "depth"], -1, f"corrupt (field 'memories.stack.depth' must be an integer >= 0, got -1): {RECOMPILE}"),
    (["memories", "prog", "kind"], "flash", f"corrupt (field 'memories.prog.kind' must be one of \"rom\", \"ram\", got \"flash\"): {RECOMPILE}"),
    (["circuit"], DELETE, f"corrupt (field 'circuit' is missing (it must be an object)): {RECOMPILE}"),
    (["circuit", "nodes", 3], {"op": "add"}, f"corrupt (field 'circuit.nodes[3]' must be an array of 6 items, got {{\"op\": \"add\"}}): {RECOMPILE}"),
    (["circuit", "kinds", 1, "fields", 0, 1], "8", f"corrupt (field 'circuit.kinds[1].fields[0][1]' must be an integer >= 0, got \"8\"): {RECOMPILE}"),
    (["circuit", "start"], "Run", f"corrupt (field 'circuit.start' must be an array of 2 items or null, got \"Run\"): {RECOMPILE}"),
    (["roms", "prog", 0], "0x10", f"corrupt (field 'roms.prog[0]' must be an integer, got \"0x10\"): {RECOMPILE}"),
    (["config"], "x", f"corrupt (field 'config' must be an object, got \"x\"): {RECOMPILE}"),
]


@pytest.mark.parametrize("path, value, middle", CASES, ids=[".".join(map(str, c[0])) or "top"
                                                          + f"-{type(c[1]).__name__}" for c in CASES])
def test_bad_chip_json_names_the_field(compiled, tmp_path, capsys, path, value, middle):
    d = tmp_path / "ck"
    shutil.copytree(compiled, d)
    chip = json.loads((d / "chip.json").read_text())
    if path:
        chip = copy.deepcopy(chip)
        _set(chip, path, value)
    else:
        chip = value
    (d / "chip.json").write_text(json.dumps(chip))
    assert main(["check", str(d), "--steps", "2"]) == 2
    assert capsys.readouterr() == ("", f"{d / 'chip.json'}: {middle}\n")


def test_unchanged_chip_json_passes_the_schema(compiled):
    from backends.chipdir.checkpoint import load_chip_json
    assert load_chip_json(compiled)["format_version"] == 2
