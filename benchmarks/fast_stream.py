"""Single-stream tokens/s of the fast engine on one shipped program, free-running from its
start (no reader, no Python per token): the kernel's own speed.

    python benchmarks/fast_stream.py [--target compact|qwen3.5-4b] [--program multiply]
                                     [--tokens 20000] [--repeats 3] [--against REV]

Prints the load time and each repeat's tokens/s, then the median. One thread. ``--against
REV``: the kernel.c of git revision REV is built too and timed beside this checkout's, the
two alternating in one process on the same model (their struct layouts must agree), and
their streams must be the same id for id; the ratio of the medians is printed.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
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
    ap.add_argument("--against", metavar="REV",
                    help="also time the kernel.c of this git revision, alternating")
    a = ap.parse_args()
    path = compiled_core(target=a.target)
    with tempfile.TemporaryDirectory() as tmp:
        elf = toolchain.build(toolchain.shipped_programs()[a.program], Path(tmp) / "p.elf")
        image = load_program(elf, None)
    t0 = time.perf_counter()
    eng = FastEngine(path, roms=image.images, threads=1)
    print(f"{a.target}: loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    kernels = {"this checkout": eng.native.lib}
    if a.against:
        from backends.engines.fast import native
        from hdl.sim import cbuild
        src = subprocess.run(["git", "show", f"{a.against}:backends/engines/fast/kernel.c"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
        kernels[a.against] = cbuild.build(src, ffi=native._FFI, flags=native.CFLAGS)
    rates: dict[str, list[float]] = {k: [] for k in kernels}
    first: list[int] | None = None           # the stream every kernel must emit
    for r in range(a.repeats):
        # which kernel goes first swaps every repeat: the engine's memo, shared by both,
        # is filled by whichever ran before
        for name, lib in list(kernels.items())[::1 if r % 2 == 0 else -1]:
            eng.native.lib = lib
            cache = eng.new_cache(1, [image.images])
            t0 = time.perf_counter()
            ids = eng.run(cache, 0, eng.token_id(image.start), a.tokens)
            rates[name].append(len(ids) / (time.perf_counter() - t0))
            first = list(ids) if first is None else first
            if list(ids) != first:
                raise SystemExit(f"the kernel of {name} emitted another stream")
            print(f"  {name}: {len(ids)} tokens of {a.program}: {rates[name][-1]:,.0f} "
                  f"tokens/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in med.items():
        print(f"median {v:,.0f} tokens/s single stream ({k})")
    if a.against:
        print(f"this checkout / {a.against}: {med['this checkout'] / med[a.against]:.3f}x, "
              f"the same {len(first):,} ids")


if __name__ == "__main__":
    main()
