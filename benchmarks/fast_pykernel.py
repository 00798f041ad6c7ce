"""The fast engine's numpy kernel against its C kernel, side by side in one process: one example
compiled for the compact target, one stream free-running from its start on each kernel in
alternating runs, the ids checked equal.

    python benchmarks/fast_pykernel.py [--example gcd] [--dtype bf16] [--tokens 300]
                                       [--repeats 3]

Prints each run's tokens/s and the median of each kernel. One thread.
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

import deltachip  # noqa: E402
from backends.engines.fast.engine import FastEngine  # noqa: E402
from backends.engines.fast.native import Native  # noqa: E402
from backends.engines.fast.pykernel import PyKernel  # noqa: E402
from hdl.sim import parse_token  # noqa: E402

STARTS = {"gcd": "Step a=144 b=233"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="gcd")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    src = ROOT / "examples" / a.example / f"{a.example}.hdl"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "chip"
        deltachip.compile(deltachip.load(src), target="compact", dtype=a.dtype).save(d)
        eng = FastEngine(d, threads=1)
        assert isinstance(eng.native, Native)
        start = (parse_token(eng.circuit, STARTS[a.example]) if a.example in STARTS
                 else eng.circuit.start)
        first = eng.token_id(start)
        kernels = {"C": eng.native, "Python": PyKernel(eng.model)}
        rates: dict[str, list[float]] = {k: [] for k in kernels}
        ids = {}
        for _ in range(a.repeats):
            for name, k in kernels.items():
                eng.native = k
                cache = eng.new_cache(1)
                t0 = time.perf_counter()
                ids[name] = eng.run(cache, 0, first, a.tokens).tolist()
                rates[name].append(len(ids[name]) / (time.perf_counter() - t0))
                print(f"  {name}: {len(ids[name])} tokens of {a.example} ({a.dtype}), "
                      f"{rates[name][-1]:,.0f} tokens/s", flush=True)
            assert ids["C"] == ids["Python"], "the kernels disagree"
    for name, r in rates.items():
        print(f"{name}: median {statistics.median(r):,.0f} tokens/s single stream")
    print(f"C / Python: {statistics.median(rates['C']) / statistics.median(rates['Python']):,.0f}x")


if __name__ == "__main__":
    main()
