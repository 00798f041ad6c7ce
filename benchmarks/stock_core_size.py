"""The size of a stock-layout merge of the RISC-V core into a Qwen3.5-4B-shaped base, planned
without writing it.

``deltachip merge --layout stock`` plans every output tensor (``backends.merge.stock``'s
planner: shapes and dtypes, so the bytes it would write) before it writes any. This script
runs that planner on a base with Qwen3.5-4B's shapes (hidden 2560, vocab 248,320, tied, 32
layers, GDN 16x128 / 32x128 heads, MLP 9216) whose shards are sparse files (their headers,
and holes for the data: no disk space, nothing random to make) and on the core from the
core cache (compiled at qwen3.5-4b, the base's module shapes), and prints the bytes by part:
the chip's layers, the base's layers at the merged width, the embedding and lm_head rows of
the base's ids and of the chip's. Nothing is written but the sparse base.

``--write`` then runs the merge itself on that base (``deltachip merge BASE OUT --firmware
calc --layout stock`` in a child under ``/usr/bin/time -v``): the bytes it wrote, how many of
them are zeros, its wall time and peak RSS. It needs the output's size free on disk.

    python benchmarks/stock_core_size.py [--write]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.merge_figures import base_shapes  # noqa: E402

#: the anchor's homogeneous merged checkpoint (bf16), the issue's target for the stock layout
ANCHOR_BYTES = 18.7e9


def sparse_base(d: Path, layers: int) -> None:
    """A Qwen3.5 base with merge_figures.SHAPES and ``layers`` layers, one shard, its data a hole."""
    from tests.merge.bases import make_tokenizer
    cfg, shapes = base_shapes(layers)
    header, at = {}, 0
    for k in sorted(shapes):
        n = 2
        for s in shapes[k]:
            n *= s
        header[k] = {"dtype": "BF16", "shape": list(shapes[k]), "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    d.mkdir(parents=True)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + at)
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    cfg.save_pretrained(str(d))
    make_tokenizer(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/stock-core-size"))
    ap.add_argument("--write", action="store_true", help="run the merge too")
    a = ap.parse_args()
    from backends.merge.base import read_base
    from backends.merge.routed import _read_chip
    from backends.merge.stock import _Planner, check_chip_fits, plan_layout, plans_size
    from cpu.rv32.build import FULL
    from cpu.rv32.engines import compiled_core
    shutil.rmtree(a.dir, ignore_errors=True)
    sparse_base(a.dir / "base", a.layers)
    base = read_base(a.dir / "base")
    core = compiled_core(FULL, "qwen3.5-4b", "bf16")
    chip = _read_chip(core, None)
    check_chip_fits(base, chip)
    lay = plan_layout(base, chip)
    pl = _Planner(base, chip, lay)
    chip_layers = [p for s in pl.chip_layers() for p in s]
    rest = [p for s in pl.base_shards() for p in s]
    vb = base.vocab_size
    tables = [p for p in rest if p.name in ("model.embed_tokens.weight", "lm_head.weight")]
    vocab = tables[0].shape[0]
    vc = vocab - vb
    row = lay.hidden * 2
    parts = {
        f"chip layers ({pl.lc}, hidden {lay.hidden})": plans_size(chip_layers),
        f"base layers ({a.layers}, widened from {lay.hb})":
            plans_size([p for p in rest if p not in tables]),
        f"embedding + lm_head, the base's {vb:,} ids": 2 * vb * row,
        f"embedding + lm_head, the chip's {vc:,} ids": 2 * vc * row,
    }
    total = sum(parts.values())
    base_bytes = base.nbytes
    print(f"base: {base_bytes:,} bytes ({a.layers} layers, tied); core: {core.name}, hidden "
          f"{lay.hc}, {pl.lc} layers in the stock layout; merged hidden {lay.hidden}")
    for k, v in parts.items():
        print(f"  {k}: {v / 1e9:.2f} GB")
    print(f"stock merge: {total:,} bytes = {total / 1e9:.2f} GB ({total / base_bytes:.2f}x the "
          f"base); target <= {ANCHOR_BYTES / 1e9:.1f} GB")
    no_ids = total - parts[f"embedding + lm_head, the chip's {vc:,} ids"]
    print(f"the same with no chip token rows at all: {no_ids / 1e9:.2f} GB")
    if a.write:
        write(a.dir, sum(plans_size(s) for s in pl.chip_layers() + pl.base_shards() if s))
    shutil.rmtree(a.dir, ignore_errors=True)


def write(d: Path, planned: int) -> None:
    """The merge itself, in a child under /usr/bin/time -v (see the module docstring)."""
    from benchmarks.merge_stock_fidelity import _zero_bytes
    out = d / "stock"
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "deltachip", "merge",
                        str(d / "base"), str(out), "--firmware", "calc", "--layout", "stock"],
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if r.returncode:
        sys.exit(f"the merge failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    weights = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    every = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    zeros = _zero_bytes(out)
    print(f"written: {every:,} bytes in all ({weights:,} of them the weights: "
          f"{'the planned' if weights == planned else 'NOT the planned'} size), "
          f"{zeros:,} bytes of zeros ({zeros / weights:.0%}); merge {wall:.1f} s wall, peak "
          f"RSS {rss / 1024:,.0f} MiB")
    print(r.stdout.strip())


if __name__ == "__main__":
    main()
