"""Single-stream tokens/s of the fast engine on one shipped program, free-running from its
start (no reader, no Python per token): the kernel's own speed.

    python benchmarks/fast_stream.py [--target compact|qwen3.5-4b] [--program multiply]
                                     [--tokens 20000] [--repeats 3] [--against REV]
                                     [--against-core DIR]

Prints the load time and each repeat's tokens/s, then the median. One thread. ``--against
REV``: the kernel.c of git revision REV is built too and timed beside this checkout's, the
two alternating in one process on the same model (their struct layouts must agree), and
their streams must be the same id for id; the ratio of the medians is printed.
``--against-core DIR``: another compiled core (a directory ``deltachip compile`` or the core
cache wrote, e.g. the core of an older revision compiled in a worktree of it with its own
``DELTACHIP_CACHE``) timed beside this checkout's, on this checkout's kernel, alternating
likewise; the same ids required.
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
    ap.add_argument("--against-core", metavar="DIR", type=Path,
                    help="also time this compiled core on this checkout's kernel, alternating")
    a = ap.parse_args()
    path = compiled_core(target=a.target)
    with tempfile.TemporaryDirectory() as tmp:
        elf = toolchain.build(toolchain.shipped_programs()[a.program], Path(tmp) / "p.elf")
        image = load_program(elf, None)
    t0 = time.perf_counter()
    eng = FastEngine(path, roms=image.images, threads=1)
    print(f"{a.target}: loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    # name -> (engine, kernel library): what is timed, alternating
    runs = {"this checkout": (eng, eng.native.lib)}
    if a.against:
        from backends.engines.fast import native
        from hdl.sim import cbuild
        src = subprocess.run(["git", "show", f"{a.against}:backends/engines/fast/kernel.c"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
        runs[a.against] = (eng, cbuild.build(src, ffi=native._FFI, flags=native.CFLAGS))
    if a.against_core:
        other = FastEngine(a.against_core, roms=image.images, threads=1)
        runs[f"core {a.against_core.name}"] = (other, other.native.lib)
    rates: dict[str, list[float]] = {k: [] for k in runs}
    first: list[int] | None = None           # the stream every run must emit
    for r in range(a.repeats):
        # which goes first swaps every repeat: an engine's memo, shared by both kernels,
        # is filled by whichever ran before
        for name, (e, lib) in list(runs.items())[::1 if r % 2 == 0 else -1]:
            e.native.lib = lib
            cache = e.new_cache(1, [image.images])
            t0 = time.perf_counter()
            ids = e.run(cache, 0, e.token_id(image.start), a.tokens)
            rates[name].append(len(ids) / (time.perf_counter() - t0))
            first = list(ids) if first is None else first
            if list(ids) != first:
                raise SystemExit(f"{name} emitted another stream")
            print(f"  {name}: {len(ids)} tokens of {a.program}: {rates[name][-1]:,.0f} "
                  f"tokens/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in med.items():
        print(f"median {v:,.0f} tokens/s single stream ({k})")
    for other in list(runs)[1:]:
        print(f"this checkout / {other}: {med['this checkout'] / med[other]:.3f}x, "
              f"the same {len(first):,} ids")


if __name__ == "__main__":
    main()
