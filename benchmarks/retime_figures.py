"""Residual dims with and without retiming (docs/backend.md, "Retiming").

For each example (examples/*/<name>.hdl) and two random ~1,000-node circuits with memories
(tests/hdl/ir_fuzz.py), schedules for ``--target`` and allocates lanes twice: ASAP only
(``lanes.allocate(prog)``) and after the retiming pass (``retime``, then ``lanes.allocate(prog, cap)``). Prints
layers, dims, the widest MLP layer, neurons moved, and the seconds of scheduling and of
allocation (retiming included).

Usage: python benchmarks/retime_figures.py [--target compact|qwen3.5-4b|CONFIG.json]
"""
from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.compile import lanes  # noqa: E402
from backends.compile.retime import retime  # noqa: E402
from backends.compile.schedule import DepthRuleError, check_depth_rule, schedule  # noqa: E402
from backends.chipdir.target import get_target  # noqa: E402
from hdl.frontend import load_circuit  # noqa: E402
from hdl.ir import Circuit  # noqa: E402
from tests.hdl.ir_fuzz import random_circuit  # noqa: E402


def random_with_memories(n: int, seed: int) -> tuple[Circuit, int]:
    """The first circuit from ``seed`` on that obeys the depth rule."""
    for s in range(seed, seed + 200):
        c = random_circuit(random.Random(s), n_nodes=n, n_kinds=3, n_memories=3, halt_kinds=False)
        try:
            check_depth_rule(c)
            return c, s
        except DepthRuleError:
            pass
    raise SystemExit(f"no circuit obeying the depth rule from seed {seed}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="compact")
    a = ap.parse_args()
    tgt = get_target(a.target)
    cs = [(n, load_circuit(ROOT / "examples" / n / f"{n}.hdl"))
          for n in ("counter", "gcd", "stack_machine")]
    for seed in (100, 200):
        c, s = random_with_memories(1000, seed)
        cs.append((f"random (seed {s}, {len(c.nodes)} nodes)", c))
    print(f"target {a.target}")
    print("| circuit | layers | dims ASAP | dims retimed | widest MLP ASAP -> retimed "
          "| neurons moved | schedule s | allocate s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, c in cs:
        t0 = time.perf_counter()
        p = schedule(c, tgt)
        ts = time.perf_counter() - t0
        p1 = copy.deepcopy(p)
        lanes.allocate(p1)
        t0 = time.perf_counter()
        lanes.allocate(p, retime(p)["mlp_width"])
        ta = time.perf_counter() - t0
        width = lambda q: max((len(v) for v in q.mlp.values()), default=0)
        print(f"| {name} | {p.n_layers} | {p1.n_phys} | {p.n_phys} | {width(p1)} -> {width(p)} "
              f"| {p.sched['moved_neurons']} | {ts:.2f} | {ta:.2f} |", flush=True)


if __name__ == "__main__":
    main()
