"""Fixtures of the merge tests: tiny Qwen3.5 bases and compiled chips, built once a session
(nothing is downloaded), and their merges."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

from tests.merge.bases import make_base, make_vl_base

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def bases(tmp_path_factory) -> dict[str, Path]:
    """'tied' and 'untied' single-file bases, 'sharded' (untied, 11 shards with an index),
    'vl' (a vision-language checkpoint whose text model is 'tied''s)."""
    d = tmp_path_factory.mktemp("bases")
    out = {"tied": make_base(d / "tied", tied=True, seed=1),
           "untied": make_base(d / "untied", tied=False, seed=2),
           "sharded": make_base(d / "sharded", tied=False, seed=3, shard_bytes=400_000)}
    out["vl"] = make_vl_base(d / "vl", out["tied"], seed=4)
    return out


@pytest.fixture(scope="session")
def chips(tmp_path_factory) -> dict[str, Path]:
    """Compiled examples: the counter in bf16 and fp32, the stack machine (a ROM) in bf16."""
    import deltachip
    d = tmp_path_factory.mktemp("chips")
    out = {}
    for name, src, dtype in (("counter", "counter/counter.hdl", "bf16"),
                             ("counter32", "counter/counter.hdl", "fp32"),
                             ("stack", "stack_machine/stack_machine.hdl", "bf16")):
        circuit = deltachip.load(str(ROOT / "examples" / src))
        out[name] = deltachip.compile(circuit, target="compact", dtype=dtype).save(d / name)
    return out


@pytest.fixture(scope="session")
def merged(tmp_path_factory, bases, chips):
    """merged(base, chip) -> OUT_DIR, each pair merged once a session."""
    from backends.merge.routed import merge_routed
    d = tmp_path_factory.mktemp("merged")
    done: dict[tuple[str, str], Path] = {}

    def get(base: str, chip: str) -> Path:
        if (base, chip) not in done:
            out = d / f"{base}-{chip}"
            merge_routed(bases[base], out, chips[chip])
            done[base, chip] = out
        return done[base, chip]
    return get


@pytest.fixture(scope="session")
def qchips(tmp_path_factory, bases) -> dict:
    """The counter (bf16, fp32) and the stack machine (bf16, a ROM) compiled for the tiny
    bases' module shapes (``--target BASE/config.json``)."""
    import deltachip
    d = tmp_path_factory.mktemp("qchips")
    target = str(bases["tied"] / "config.json")
    out = {}
    for name, src, dtype in (("counter", "counter/counter.hdl", "bf16"),
                             ("counter32", "counter/counter.hdl", "fp32"),
                             ("stack", "stack_machine/stack_machine.hdl", "bf16")):
        circuit = deltachip.load(str(ROOT / "examples" / src))
        out[name] = deltachip.compile(circuit, target=target, dtype=dtype).save(d / name)
    return out


@pytest.fixture(scope="session")
def stock(tmp_path_factory, bases, qchips):
    """stock(base, chip) -> (OUT_DIR, report), each pair merged once a session."""
    from backends.merge.stock import merge_stock
    d = tmp_path_factory.mktemp("stock")
    done: dict = {}

    def get(base: str, chip: str):
        if (base, chip) not in done:
            out = d / f"{base}-{chip}"
            done[base, chip] = (out, merge_stock(bases[base], out, qchips[chip]))
        return done[base, chip]
    return get


def load(path: Path, dtype: torch.dtype, remote: bool = True):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                 trust_remote_code=remote)
    return m.eval()


@pytest.fixture(autouse=True, scope="session")
def _offline():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qwen_bases(tmp_path_factory) -> dict[str, Path]:
    """Tiny bases carrying Qwen3.5's real tokenizer and chat template (tests/merge/qwen35.py):
    'tied' and 'untied'."""
    from tests.merge.qwen35 import make_qwen_base
    d = tmp_path_factory.mktemp("qwen-bases")
    return {"tied": make_qwen_base(d / "tied", tied=True, seed=5),
            "untied": make_qwen_base(d / "untied", tied=False, seed=6)}


@pytest.fixture(scope="session")
def calc_elf(tmp_path_factory):
    """calc, built once a session."""
    from firmware import toolchain
    d = tmp_path_factory.mktemp("calc")
    return toolchain.build(toolchain.shipped_programs()["calc"], d / "calc.elf")


@pytest.fixture(scope="session")
def merged_tools(qwen_bases, calc_elf, tmp_path_factory, worker_id) -> Path:
    """``deltachip merge BASE OUT --firmware calc --firmware python`` of ``qwen_bases['tied']``
    (routed, the compact core compiled for the base's vocabulary; calc is program 0, the one
    the calc tests also drive token by token, python program 1): the model test_bridge.py, test_bridge_qwen.py and test_python_tool.py all
    call. Built once a test run: under pytest-xdist every worker looks for it in the run's
    shared temporary folder, the first builds it there under a lock (the merge writes a
    temporary folder and renames it into place, so a folder there is whole) and the others
    wait for it; its bases and calc are built alike in every worker (fixed seeds, the same
    sources), so each worker's references are the merged ones."""
    from common.cachedir import entry_lock
    from deltachip.cli import main
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent                  # pytest-N/, shared by the run's workers
    home = root / "merged-tools"
    home.mkdir(exist_ok=True)
    out = home / "out"
    with entry_lock(out):
        if not out.is_dir():
            assert main(["merge", str(qwen_bases["tied"]), str(out), "--firmware",
                         str(calc_elf), "--firmware", "python", "--target", "compact"]) == 0
    return out
