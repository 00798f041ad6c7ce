"""Two compiled cores side by side on the fast engine: tokens/s of one program, alternated.

    python benchmarks/core_ab.py CORE_A CORE_B [--program matrix] [--tokens 30000]
                                 [--repeats 5]

CORE_A and CORE_B are compiled core directories (the core cache's entries, e.g. one built
from an older revision's cpu/rv32 with DELTACHIP_CACHE pointing elsewhere). Both load the
same shipped program's images (the loader is the same for both); each repeat runs CORE_A
then CORE_B free-running ``--tokens`` tokens from the start, one thread each, so the
machine's drift falls on both. Prints every rate, the medians and B/A. A change to the core
(cpu/rv32/*.hdl) moves the speed of every program through the weights it adds, which a
kernel benchmark at one revision (benchmarks/fast_stream.py) cannot show; tokens per
instruction come from benchmarks/core_figures.py.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from backends.engines.fast.engine import FastEngine  # noqa: E402
from benchmarks.fast_engine import stream_rate  # noqa: E402
from cpu.rv32.loader import load_program  # noqa: E402
from firmware import toolchain  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("core_a", type=Path)
    ap.add_argument("core_b", type=Path)
    ap.add_argument("--program", default="matrix")
    ap.add_argument("--tokens", type=int, default=30_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    shipped = toolchain.shipped_programs()
    if a.program not in shipped:
        sys.exit(f"core_ab: no shipped program {a.program} (shipped: {', '.join(sorted(shipped))})")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        image = load_program(toolchain.build(shipped[a.program], Path(tmp) / "p.elf"), None)
    engines = {"A": FastEngine(a.core_a, roms=image.images, threads=1),
               "B": FastEngine(a.core_b, roms=image.images, threads=1)}
    rates: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(a.repeats):
        for k, eng in engines.items():
            rates[k].append(stream_rate(eng, image, a.tokens, 1)[0])
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, path in (("A", a.core_a), ("B", a.core_b)):
        print(f"{k} {path}: median {med[k]:,.0f} tokens/s ("
              + ", ".join(f"{r:,.0f}" for r in rates[k]) + ")")
    print(f"{a.program}, {a.tokens:,} tokens, {a.repeats} repeats alternated: B/A {med['B'] / med['A']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
