"""Long verification runs of the fast engine on the compiled core (not part of any test run).

    python scripts/long_runs.py lockstep  [--target T] [--instructions N] [--threads 2]
    python scripts/long_runs.py against-hf [--target T] [--positions N]

``lockstep``: shipped programs (and calc on several inputs), round robin, free-running on
the fast engine on ``--threads`` threads until at least N instructions have retired in
all; every stream is checked against the golden emulator at every retired instruction (its
pc and the value it writes back, then its output and exit: ``cpu.rv32.lockstep``).

``against-hf``: the same programs' whole token streams as the fast engine emits them,
fed to transformers (engine hf) in chunked prefill, 2,048 positions per call with the cache
carried over, until at least N positions: at every position hf's argmax must be the token
the fast engine emitted next, and every memory of the two engines must agree after every
call. (Prefill is proven exact for the core, docs/cpu.md "Figures".)

Both print one line per stream and a total with the wall time; exit 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cpu.emulator import Machine  # noqa: E402
from cpu.rv32.build import FULL  # noqa: E402
from cpu.rv32.engines import compiled_core, fast_advance  # noqa: E402
from cpu.rv32.loader import load_program  # noqa: E402
from cpu.rv32.lockstep import LockStep  # noqa: E402
from firmware import toolchain  # noqa: E402

#: (program, input): the mix, longest first
MIX = [("sieve", None), ("softfloat", None), ("sha256", None), ("matrix", None),
       ("aes128", None), ("sort", None), ("crc32c", None), ("multiply", None), ("crc32", None),
       ("div64", None), ("fibonacci", None), ("switch", None), ("calc", b"2**100"),
       ("calc", b"123456789*987654321-5"), ("calc", b"(1/3 + 1/6) * 4"),
       ("calc", b"3**200 // 7**50"), ("calc", b"-7 // 2"), ("calc", b"1/0"), ("hello", None),
       ("sum", None), ("product", None)]


def build_all(out: Path) -> dict[str, Path]:
    """The mix's programs built afresh into ``out`` (an ELF left there by an earlier run may
    come from older sources or runtime)."""
    out.mkdir(parents=True, exist_ok=True)
    elfs = {}
    for name in sorted({n for n, _ in MIX}):
        elfs[name] = out / f"{name}.elf"
        toolchain.build(toolchain.shipped_programs()[name], elfs[name])
    return elfs


def lockstep(args: argparse.Namespace, elfs: dict[str, Path]) -> int:
    from backends.engines.fast.engine import FastEngine
    path = compiled_core(FULL, args.target, args.dtype)
    eng = FastEngine(path, args.dtype, threads=1)
    lock = threading.Lock()
    total = {"instructions": 0, "tokens": 0, "streams": 0, "bad": 0}
    jobs = itertools.cycle(MIX)
    t0 = time.perf_counter()

    def worker(_: int) -> None:
        while True:
            with lock:
                if total["instructions"] >= args.instructions:
                    return
                name, text = next(jobs)
            elf = elfs[name]
            image = load_program(elf, text)
            cache = eng.new_cache(1, [image.images])
            ls = LockStep(Machine.from_elf(elf, text))
            ls.feed(image.start)
            s0 = time.perf_counter()
            fast_advance(eng, cache, 0, ls, image.start, 10**9)
            ls.finish()
            with lock:
                total["instructions"] += ls.checked
                total["tokens"] += ls.tokens
                total["streams"] += 1
                total["bad"] += not ls.ok
                label = name + (f" {text.decode()!r}" if text else "")
                print(f"{label:32s} {ls.checked:>9,} instructions {ls.tokens:>9,} tokens "
                      f"{time.perf_counter() - s0:7.1f} s  "
                      f"{'ok' if ls.ok else 'MISMATCH: ' + ls.mismatches[0]}  "
                      f"[total {total['instructions']:,}]", flush=True)

    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(worker, range(args.threads)))
    secs = time.perf_counter() - t0
    print(f"lockstep total: {total['streams']} streams, {total['instructions']:,} instructions, "
          f"{total['tokens']:,} tokens, {total['bad']} streams with mismatches, "
          f"{secs / 60:.1f} min ({total['tokens'] / secs:,.0f} tokens/s on {args.threads} "
          f"threads, the checker included)")
    return 1 if total["bad"] else 0


def against_hf(args: argparse.Namespace, elfs: dict[str, Path]) -> int:
    from backends.engines.fast.engine import FastEngine
    from backends.engines.hf import HFEngine
    path = compiled_core(FULL, args.target, args.dtype)
    fast = FastEngine(path, args.dtype, threads=1)
    hf = HFEngine(path, args.dtype)
    positions = bad = 0
    t0 = time.perf_counter()
    for name, text in itertools.cycle(MIX):
        if positions >= args.positions:
            break
        image = load_program(elfs[name], text)
        roms = [image.images]
        run = fast.new_cache(1, roms)
        stop = fast.stop_bitmap([k for k, kind in enumerate(fast.circuit.kinds) if kind.halt])
        first = fast.token_id(image.start)
        ids = np.concatenate([[first], fast.run(run, 0, first, 10**7, stop)])
        ca, cb = fast.new_cache(1, roms), hf.new_cache(1, roms)
        s0 = time.perf_counter()
        problem = None
        for off in range(0, len(ids), args.chunk):
            blk = torch.from_numpy(ids[off:off + args.chunk].astype(np.int64))[None]
            pa, _ = fast.prefill(blk, ca)
            pb, _ = hf.prefill(blk, cb)
            want = ids[off + 1:off + 1 + blk.shape[1]]
            n = len(want)
            a, b = pa[0, :n].numpy(), pb[0, :n].numpy()
            if not (np.array_equal(a, want) and np.array_equal(b, want)):
                k = int(np.flatnonzero((a != want) | (b != want))[0])
                problem = (f"position {off + k}: emitted {want[k]}, fast teacher-forced "
                           f"{a[k]}, hf {b[k]}")
                break
            ma, mb = fast.read_memories(ca, 0), hf.read_memories(cb, 0)
            diff = [m for m in mb if ma[m] != mb[m]]
            if diff:
                problem = f"after position {off + blk.shape[1] - 1}: memory {diff[0]} differs"
                break
        positions += len(ids)
        bad += problem is not None
        label = name + (f" {text.decode()!r}" if text else "")
        print(f"{label:32s} {len(ids):>9,} positions {time.perf_counter() - s0:8.1f} s  "
              f"{'ok' if problem is None else 'MISMATCH: ' + problem}  [total {positions:,}]",
              flush=True)
    secs = time.perf_counter() - t0
    print(f"against-hf total: {positions:,} positions, {bad} streams with mismatches, "
          f"{secs / 60:.1f} min")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["lockstep", "against-hf"])
    ap.add_argument("--target", default="qwen3.5-4b")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--instructions", type=int, default=20_000_000)
    ap.add_argument("--positions", type=int, default=250_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--only", nargs="+", metavar="PROG", help="run only these programs of the mix")
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "long_runs")
    args = ap.parse_args()
    if args.only:
        MIX[:] = [m for m in MIX if m[0] in args.only]
    torch.set_num_threads(args.threads)
    elfs = build_all(args.build)
    return (lockstep if args.mode == "lockstep" else against_hf)(args, elfs)


if __name__ == "__main__":
    sys.exit(main())
