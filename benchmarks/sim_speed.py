"""Steps per second of the reference simulator, C and Python backends side by side.

Builds a random ~N-node circuit with tests/hdl/ir_fuzz.py (every op, widths 1..64, three
memories), then times ``Simulator.run`` (the compiled run loop) and a Python loop over
``Simulator.step`` (one call per token, as a driver that inspects every step would do).
Reports the median of several runs, and the cold compile time of the C backend.

Usage: python benchmarks/sim_speed.py [--nodes 1000] [--repeats 5] [--seed 1] [--min-rate 50000]

Exit status 1 when the C backend's run() rate is below ``--min-rate`` (issue 2's target:
50,000 steps/s on ~1,000 nodes; a wall-clock figure, so it lives here, not in the tests).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hdl.ir import Token  # noqa: E402
from hdl.sim import Simulator  # noqa: E402
from tests.hdl.ir_fuzz import random_circuit, random_images, random_token  # noqa: E402


def rate(fn, steps: int, repeats: int) -> float:
    """Median steps/s of ``fn(steps)`` over ``repeats`` runs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = fn(steps)
        times.append(done / (time.perf_counter() - t0))
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-rate", type=float, default=50_000,
                    help="fail when the C backend's run() steps/s is below this")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    c = random_circuit(rng, n_nodes=a.nodes, n_kinds=3, n_memories=3, halt_kinds=False)
    images = random_images(rng, c)
    start: Token = random_token(rng, c)
    print(f"circuit: {len(c.nodes)} nodes, {len(c.kinds)} token kinds, "
          f"{len(c.memories)} memories ({', '.join(f'{m.kind} u{m.width}[{m.depth}]' for m in c.memories.values())})")

    with tempfile.TemporaryDirectory() as cache:
        os.environ["DELTACHIP_CACHE"] = cache
        t0 = time.perf_counter()
        Simulator(c, roms=images, backend="c")
        print(f"C backend cold build (generate + gcc + load): {time.perf_counter() - t0:.2f} s")
        del os.environ["DELTACHIP_CACHE"]

    rows = []
    for backend, n_run, n_step in (("c", 200_000, 20_000), ("python", 2_000, 2_000)):
        sim = Simulator(c, roms=images, backend=backend)

        def run(n, sim=sim):
            return len(sim.run(start, n)) - 1

        def step(n, sim=sim):
            tok = start
            for _ in range(n):
                tok = sim.step(tok).next
            return n

        rows.append((backend, rate(run, n_run, a.repeats), rate(step, n_step, a.repeats)))
    print(f"{'backend':8} {'run() steps/s':>15} {'step() steps/s':>15}")
    for backend, r, s in rows:
        print(f"{backend:8} {r:15,.0f} {s:15,.0f}")
    c_run = rows[0][1]
    if c_run < a.min_rate:
        print(f"FAILED: C backend run() {c_run:,.0f} steps/s < {a.min_rate:,.0f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
