"""The fast engine against transformers on the compiled core, side by side in one run.

Prints: the CPU's bf16 features; single-stream tokens/s of fast and hf on the same trace
(hf on its first ``--hf-tokens`` positions only) and their ratio; the batched aggregate of
``--batch`` streams on ``--threads`` threads; per C program the wall time, tokens and
instructions per second on the fast engine (``deltachip run --engine fast``'s path), each
outcome checked against the golden emulator. Medians of ``--repeats`` runs.

    python benchmarks/fast_engine.py [--target compact|qwen3.5-4b] [--batch 64] [--threads 2]
                                     [--repeats 3] [--program-repeats 1]

The programs' wall time is ``deltachip run --engine fast``'s run (the load excluded), set
beside the fastest public peer's published figures (``peer s``; ``peer/ours`` > 1: faster).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from cpu.emulator import Machine  # noqa: E402
from cpu.rv32.engines import compiled_core, fast_engine  # noqa: E402
from cpu.rv32.loader import load_program  # noqa: E402
from firmware import toolchain  # noqa: E402

#: (label, program, input, the fastest public peer's wall seconds on a CPU like ours: a WASM
#: interpreter compiled into a 7-layer transformer with a sparse C++ engine; None: not given)
PROGRAMS = [("sum 1..100", "sum", None, 0.15),
            ("fibonacci to 102,334,155", "fibonacci", None, 0.95),
            ("12345 x 6789 by addition", "multiply", None, 6.25),
            ("primes below 20,000", "sieve", None, 68.0),
            ("calc 2**100", "calc", b"2**100", None)]


def cpu_flags() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    return " ".join(sorted({f for f in ("avx512_bf16", "amx_bf16", "avx2") if f in out}))


def stream_rate(engine, image, n: int, repeats: int) -> tuple[float, int]:
    """Median tokens/s of one stream free-running ``n`` tokens from the start."""
    rates = []
    for _ in range(repeats):
        cache = engine.new_cache(1, [image.images])
        t0 = time.perf_counter()
        ids = engine.run(cache, 0, engine.token_id(image.start), n)
        rates.append(len(ids) / (time.perf_counter() - t0))
    return statistics.median(rates), len(ids)


def hf_rate(path, image, n: int) -> float:
    from backends.hf_engine import HFEngine
    eng = HFEngine(path, roms=image.images)
    cache = eng.new_cache(1)
    tid = eng.token_id(image.start)
    eng.decode_step([tid], cache)                   # warm-up
    t0 = time.perf_counter()
    for _ in range(n):
        tid = int(eng.decode_step([tid], cache)[0])
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="compact")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=20000, help="tokens per stream timed")
    ap.add_argument("--hf-tokens", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--program-repeats", type=int, default=1)
    ap.add_argument("--no-programs", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    from backends.fast.engine import FastEngine
    print(f"CPU: {os.cpu_count()} cores, flags: {cpu_flags()}; target {a.target}, bf16")
    path = compiled_core(target=a.target)
    out = Path("build/bench")
    out.mkdir(parents=True, exist_ok=True)
    sieve = toolchain.build(toolchain.shipped_programs()["sieve"], out / "sieve.elf")
    image = load_program(sieve, None)
    t0 = time.perf_counter()
    eng = FastEngine(path, roms=image.images, threads=a.threads)
    print(f"fast engine load: {time.perf_counter() - t0:.1f} s")

    fast1, n = stream_rate(eng, image, a.tokens, a.repeats)
    hf1 = hf_rate(path, image, a.hf_tokens)
    print(f"single stream (sieve's first tokens): fast {fast1:,.0f} tokens/s ({n:,} tokens), "
          f"hf {hf1:,.2f} tokens/s ({a.hf_tokens} tokens): fast/hf = {fast1 / hf1:,.0f}x")

    cache = eng.new_cache(a.batch, [image.images] * a.batch)
    first = eng.token_id(image.start)
    per = max(1, a.tokens // 8)
    t0 = time.perf_counter()
    done = sum(len(x) for x in eng._each(lambda b: eng.run(cache, b, first, per), a.batch))
    agg = done / (time.perf_counter() - t0)
    print(f"batched: {a.batch} streams x {per:,} tokens on {a.threads} threads: "
          f"{agg:,.0f} tokens/s aggregate")
    del cache

    if a.no_programs:
        return
    print(f"{'program':28} {'wall s':>8} {'tokens':>9} {'instr':>9} {'tokens/s':>9} "
          f"{'instr/s':>9}  = ref  {'peer s':>7} {'peer/ours':>9}")
    for label, name, text, peer in PROGRAMS:
        elf = toolchain.build(toolchain.shipped_programs()[name], out / f"{name}.elf")
        times = []
        for _ in range(a.program_repeats):
            core = fast_engine(elf, text, target=a.target)
            t0 = time.perf_counter()
            r = core.run(10**8)
            times.append(time.perf_counter() - t0)
        want = Machine.from_elf(elf, text).run(10**8)
        same = (r.exit_code, r.output, r.instructions) == (want.exit_code, want.output,
                                                           want.instructions)
        w = statistics.median(times)
        tok = core.reader.tokens
        vs = f"{peer:7.2f} {peer / w:8.2f}x" if peer else f"{'-':>7} {'-':>9}"
        print(f"{label:28} {w:8.3f} {tok:9,} {r.instructions:9,} {tok / w:9,.0f} "
              f"{r.instructions / w:9,.0f}  {'yes ' if same else 'NO  '} {vs}")


if __name__ == "__main__":
    main()
