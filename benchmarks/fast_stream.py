"""Single-stream tokens/s of the fast engine on one shipped program, free-running from its
start (no reader, no Python per token): the kernel's own speed.

    python benchmarks/fast_stream.py [--target compact|qwen3.5-4b] [--program multiply]
                                     [--tokens 20000] [--repeats 3]

Prints the load time and each repeat's tokens/s, then the median. One thread.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.engines.fast.engine import FastEngine  # noqa: E402
from cpu.rv32.engines import compiled_core  # noqa: E402
from cpu.rv32.loader import load_program  # noqa: E402
from firmware import toolchain  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="compact")
    ap.add_argument("--program", default="multiply")
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    path = compiled_core(target=a.target)
    with tempfile.TemporaryDirectory() as tmp:
        elf = toolchain.build(toolchain.shipped_programs()[a.program], Path(tmp) / "p.elf")
        image = load_program(elf, None)
    t0 = time.perf_counter()
    eng = FastEngine(path, roms=image.images, threads=1)
    print(f"{a.target}: loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    rates = []
    for _ in range(a.repeats):
        cache = eng.new_cache(1, [image.images])
        t0 = time.perf_counter()
        ids = eng.run(cache, 0, eng.token_id(image.start), a.tokens)
        rates.append(len(ids) / (time.perf_counter() - t0))
        print(f"  {len(ids)} tokens of {a.program}: {rates[-1]:,.0f} tokens/s", flush=True)
    print(f"median {statistics.median(rates):,.0f} tokens/s single stream")


if __name__ == "__main__":
    main()
