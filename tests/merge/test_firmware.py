"""``deltachip merge --firmware``: the RISC-V core merged with a program's memory images, and
``deltachip run PROG.elf --engine hf --model MERGED_DIR`` equal to ``ref``.

The default run merges the TINY core (cpu/rv32/build.py; 2 KiB code, compact target, from
the core cache that tests/cpu/test_core_hf.py fills too: about 80 s to compile when absent)
with an ISA test of 29 instructions, its token tables structured (24.7 MB instead of
4.05 GB); a merge takes about 35 s and the run about 1 s a token on this CPU.
"""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from cpu.emulator import Machine
from cpu.rv32.build import TINY
from firmware import toolchain
from tests.merge.conftest import load

PROGRAM = "rv32i_fence"


@pytest.fixture(scope="module")
def fence_elf(tmp_path_factory):
    if not (toolchain.zig_available() or toolchain.gcc_available()):
        pytest.skip("no RISC-V compiler")
    d = tmp_path_factory.mktemp("fw")
    return toolchain.build([toolchain.ISA_TESTS_DIR / f"{PROGRAM}.S"], d / f"{PROGRAM}.elf")


@pytest.fixture(scope="module")
def merged_core(bases, fence_elf, tmp_path_factory):
    from cpu.rv32.merged import core_for, load_firmware
    from backends.merge.routed import merge_routed
    fw = load_firmware(str(fence_elf), TINY)
    core = core_for(fw, "compact", "bf16")
    out = tmp_path_factory.mktemp("merged-core") / "out"
    merge_routed(bases["tied"], out, core, firmware=fw)
    return out, core


def test_manifest_names_the_core_and_firmware(merged_core, fence_elf):
    out, core = merged_core
    m = json.loads((out / "deltachip.json").read_text())
    fw = m["firmware"]
    assert fw["name"] == PROGRAM and fw["sha256"] == hashlib.sha256(
        fence_elf.read_bytes()).hexdigest()
    assert fw["core"]["cache_entry"] == core.name and fw["core"]["target"] == "compact"
    assert fw["core_sizes"] == {"code_words": 512, "rodata_words": 128, "ram_words": 128}
    tables = m["chip"]["tables"]
    assert tables["form"] == "structured" and tables["bytes"] * 100 < tables["plain_bytes"]
    # the program's images are the merged memory images
    from cpu.rv32.loader import load_program
    words = load_program(fence_elf, None, TINY).images["code"]
    hexw = (out / m["chip"]["roms"]["code"]).read_text().split()
    assert [int(w, 16) for w in hexw] == words


def test_run_on_the_merged_model_equals_ref(merged_core, fence_elf, capfd, tmp_path):
    """`deltachip run PROG.elf --engine hf --model OUT`: the whole merged model, token by
    token, routed to the core; the outcome is ref's, and the core's start state (the
    firmware's images stored in the checkpoint) is what the run preloads."""
    from deltachip.cli import main
    out, _ = merged_core
    stats = tmp_path / "s.json"
    status = main(["run", str(fence_elf), "--engine", "hf", "--model", str(out),
                   "--stats", str(stats)])
    want = Machine.from_elf(fence_elf).run(10_000)
    got = json.loads(stats.read_text())
    assert status == want.exit_code == 0
    assert got["instructions"] == want.instructions and got["fault"] is None
    assert got["target"] == "merged" and got["tokens"] > want.instructions
    assert capfd.readouterr().out == want.output.decode()
    # the checkpoint's own start state (what generate() starts from) holds the program
    from backends.engines.merged import MergedEngine
    from cpu.rv32.loader import load_program
    eng = MergedEngine(out, roms=load_program(fence_elf, None, TINY).images)
    mine, stored = eng.new_cache(1), eng.model.chip.new_cache(1)
    for li in eng.model.chip.rom_layers:
        assert torch.equal(mine.chip.layers[li].recurrent_states[0],
                           stored.layers[li].recurrent_states[0])


def test_fast_on_the_merged_model_equals_hf_and_ref(merged_core, fence_elf, capfd, tmp_path):
    """`--engine fast --model OUT`: the fast kernel on the merged files' chip part (its
    layers, and the token tables as the merge stored them, structured) gives the merged
    model's own tokens step by step, and ref's outcome."""
    from backends.engines.fast.engine import FastEngine
    from backends.engines.merged import MergedEngine
    from cpu.rv32.loader import load_program
    from deltachip.cli import main
    out, _ = merged_core
    roms = load_program(fence_elf, None, TINY).images
    hf, fast = MergedEngine(out, roms=roms), FastEngine(out, roms=roms, threads=1)
    assert fast.model.vocab == hf.circuit.vocab_size
    ch, cf = hf.new_cache(1), fast.new_cache(1)
    tok = load_program(fence_elf, None, TINY).start
    ids = [hf.token_id(tok)]
    for _ in range(40):                 # the program's whole stream: it ends in ~35 tokens
        a, b = hf.decode_step(ids[-1:], ch), fast.decode_step(ids[-1:], cf)
        assert a.tolist() == b.tolist(), len(ids)
        ids.append(int(a[0]))
    stats = tmp_path / "s.json"
    status = main(["run", str(fence_elf), "--engine", "fast", "--model", str(out),
                   "--stats", str(stats)])
    want = Machine.from_elf(fence_elf).run(10_000)
    got = json.loads(stats.read_text())
    assert status == want.exit_code == 0 and got["engine"] == "fast"
    assert got["instructions"] == want.instructions and got["target"] == "merged"
    assert capfd.readouterr().out == want.output.decode()


def test_model_option_is_checked(merged_core, fence_elf, tmp_path, capsys):
    from deltachip.cli import main
    out, _ = merged_core
    assert main(["run", str(fence_elf), "--engine", "sim", "--model", str(out)]) == 2
    assert ("--model runs the core inside a merged checkpoint on --engine hf or fast, not "
            "--engine sim") in capsys.readouterr().err
    assert main(["run", str(fence_elf), "--engine", "hf", "--model", str(tmp_path)]) == 2
    assert "not a checkpoint written by `deltachip merge`" in capsys.readouterr().err


def test_text_still_the_bases(bases, merged_core):
    """The core's tables and layers beside the base leave text logits the base's."""
    out, _ = merged_core
    m, b = load(out, torch.bfloat16), load(bases["tied"], torch.bfloat16, remote=False)
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        lm, lb = m(input_ids=ids).logits, b(input_ids=ids).logits
    assert torch.equal(lm[..., :lb.shape[-1]], lb)
    assert bool((lm[..., lb.shape[-1]:] == float("-inf")).all())


def test_firmware_options_are_checked(bases, chips, tmp_path, capsys):
    """--target without --firmware, and a --firmware that is neither an ELF nor a shipped
    program, are refused before anything is compiled or written."""
    from deltachip.cli import main
    assert main(["merge", str(bases["tied"]), str(tmp_path / "a"), "--chip",
                 str(chips["counter"]), "--target", "compact"]) == 2
    assert "--target applies to --firmware" in capsys.readouterr().err
    assert main(["merge", str(bases["tied"]), str(tmp_path / "b"), "--firmware",
                 "no-such-program"]) == 2
    err = capsys.readouterr().err
    assert "--firmware no-such-program: no such ELF file, nor a shipped program" in err
    assert "calc" in err and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_disk_without_room_for_the_merge_is_said_before_the_core_is_built(
        bases, fence_elf, tmp_path, capsys, monkeypatch):
    """The tiny base's MLP is 128 wide, so the core compiled for it has hundreds of layers
    (324; 297 before the mux-leaf gates, whose AND neurons take room in full layers):
    a disk without room for the merge is said once the core is planned (seconds), before any
    of its weights is built (minutes), and nothing is compiled or written."""
    import re
    import shutil as sh
    from backends.compile import emit
    from deltachip.cli import main
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    built = []
    monkeypatch.setattr(emit, "group_tensors", lambda *a: built.append(a))
    monkeypatch.setattr(sh, "disk_usage", lambda p: sh._ntuple_diskusage(1 << 40, 0, 1 << 30))
    out = tmp_path / "out" / "merged"
    assert main(["merge", str(bases["tied"]), str(out), "--firmware", str(fence_elf),
                 "--layout", "stock"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(rf"OUT_DIR {out}: the merge with the core compiled for this base "
                        rf"\(\d\d\d layers\) needs \d+\.\d\d GiB, {tmp_path} has 1\.00 GiB free; "
                        r"nothing was compiled or written", err), err
    assert built == [] and not (tmp_path / "out").exists()
    assert [p.name for p in (tmp_path / "cache" / "cores").iterdir()] == []


def test_the_routed_merge_compiles_the_core_for_the_bases_vocabulary(
        bases, fence_elf, tmp_path, capsys, monkeypatch):
    """`deltachip merge --firmware` gives the core the base's text vocabulary (every id's
    bytes, for its table ROMs) in the routed layout, and none in the stock layout (its core
    reads bytes)."""
    import cpu.rv32.merged as merged
    from backends.merge.base import read_base
    from backends.chipdir.stfile import MergeError
    from deltachip.cli import main
    seen = []

    def fake_core_for(fw, target, dtype, progress=None, approve=None, text=None):
        seen.append(text)
        raise MergeError("stopped here")
    monkeypatch.setattr(merged, "core_for", fake_core_for)
    vocab = read_base(bases["tied"]).vocab_size
    for layout in ("routed", "stock"):
        assert main(["merge", str(bases["tied"]), str(tmp_path / layout), "--firmware",
                     str(fence_elf), "--layout", layout]) == 2
        assert "stopped here" in capsys.readouterr().err
    routed, stock = seen
    assert stock is None and len(routed) == vocab
    assert all(isinstance(t, bytes) for t in routed)
    assert b"<tool_call>" in routed and all(bytes([b]) in routed for b in range(256))
