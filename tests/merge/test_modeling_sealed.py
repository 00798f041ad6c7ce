"""The modeling file a routed merge ships is sealed: it imports only the standard library,
torch and transformers (deltachip's fast runner reaches it through an entry point), and it
loads where deltachip cannot be imported."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import backends.merge.shipped.modeling_deltachip as shipped

ALLOWED = {"__future__", "copy", "time", "importlib", "torch", "transformers"}


def test_it_imports_only_torch_and_transformers():
    tree = ast.parse(Path(shipped.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    assert roots <= ALLOWED, roots - ALLOWED


def test_it_loads_where_deltachip_cannot_be_imported(tmp_path):
    """A copy of the file imported in a fresh interpreter with the project off sys.path and
    its packages blocked: the classes are there, and the runner falls to the chip's own
    modules when no entry point offers another."""
    (tmp_path / "modeling_deltachip.py").write_text(Path(shipped.__file__).read_text())
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('backends', 'cpu', 'deltachip', 'hdl', 'common'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"sys.path = [p for p in sys.path if p not in ('', {str(Path.cwd())!r})]\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import modeling_deltachip as m\n"
        "assert m.DeltachipRoutedForCausalLM and m.RoutedCache and m.ToolCalls\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_its_table_buffers_are_the_format_the_writer_and_the_fast_engine_share():
    """The structured tables' tensor names and dtypes have one definition
    (:data:`backends.chipdir.merged.TABLE_TENSORS`); the shipped file, which cannot import
    it, holds the same as its buffers."""
    import torch
    from backends.chipdir.merged import TABLE_TENSORS
    dtypes = {torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8"}
    emb = shipped.PackedEmbedding(10, 8, 3, 2, lambda: torch.bfloat16)
    head = shipped.KindHead(10, 8, 2, 3)
    got = {f"model.embed_tokens.{n}": dtypes[b.dtype] for n, b in emb.named_buffers()}
    got |= {f"lm_head.{n}": dtypes[b.dtype] for n, b in head.named_buffers()}
    assert got == TABLE_TENSORS
