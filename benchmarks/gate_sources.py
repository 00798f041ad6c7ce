"""Which HDL signals drive the fast engine's MLP gate multiply-adds, on one shipped program.

    python benchmarks/gate_sources.py [--target qwen3.5-4b] [--program sieve] [--tokens 2000]
                                      [--top 25]

Runs the program's first ``--tokens`` tokens on the numpy kernel (the C kernel's results,
bit for bit) and counts, for every MLP and every input dim present (nonzero after the
pre-norm), the gate multiply-adds that dim costs (its column's nonzeros). Each dim is named
by the lane the compiler placed there at that layer (chip.json's ``lanemap``: the lane's
HDL signal, or its label for token lanes); the table sums a signal over its bits and
layers. Prints the total per token, then the signals with the most multiply-adds: what a
change to the circuit or its lowering would have to silence (a datapath whose lanes are 0
costs nothing in the sparse engine).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from backends.engines.fast.engine import FastEngine  # noqa: E402
from backends.engines.fast.pykernel import CountingKernel  # noqa: E402
from cpu.rv32.build import FULL  # noqa: E402
from cpu.rv32.engines import compiled_core  # noqa: E402
from cpu.rv32.loader import load_program  # noqa: E402
from firmware import toolchain  # noqa: E402


def lane_names(chip: dict) -> dict[tuple[int, int], str]:
    """(MLP layer, residual dim) -> the signal of the lane the compiler placed there, live
    at that MLP's input (written in an earlier slot, read at or after it)."""
    nodes = chip["circuit"]["nodes"]
    names = {}
    for dim, written, until, node, label in chip["lanemap"]["lanes"]:
        known = node is not None and 0 <= node < len(nodes)
        name = (known and nodes[node][5]) or label or (
            f"(unnamed {nodes[node][0]})" if known else f"dim {dim}")
        for layer in range(chip["shapes"]["layers"]):
            if written < 2 * layer + 1 <= until + 1:
                names[(layer, dim)] = name
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen3.5-4b")
    ap.add_argument("--program", default="sieve")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    path = compiled_core(FULL, a.target, "bf16")
    with open(path / "chip.json") as f:
        chip = json.load(f)
    eng = FastEngine(path, "bf16", threads=1)
    eng.native = kernel = CountingKernel(eng.model)
    with tempfile.TemporaryDirectory() as tmp:
        elf = toolchain.build(toolchain.shipped_programs()[a.program], Path(tmp) / "p.elf")
        image = load_program(elf, None)
    cache = eng.new_cache(1, [image.images])
    t0 = time.perf_counter()
    ids = eng.run(cache, 0, eng.token_id(image.start), a.tokens)
    n = len(ids)
    names = lane_names(chip)
    by: collections.Counter = collections.Counter()
    for layer, present in kernel.present.items():
        fan_out = np.diff(eng.model.layers[layer].gate.ptr)
        for dim, tokens in present.items():
            by[names.get((layer, dim), f"dim {dim}")] += tokens * int(fan_out[dim])
    total = sum(by.values())
    print(f"{a.program}, {n:,} tokens at {a.target} ({time.perf_counter() - t0:.0f} s on the "
          f"numpy kernel): {total / n:,.0f} gate multiply-adds per token")
    print(f"{'per token':>10} {'share':>6}  signal (all its bits and layers)")
    for name, v in by.most_common(a.top):
        print(f"{v / n:10,.0f} {100 * v / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
