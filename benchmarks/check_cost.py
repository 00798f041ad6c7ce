"""What the lane check costs: `check` on the compact examples with and without lanes.

Compiles examples/{counter,gcd,stack_machine} for the compact target (bf16) into a temporary
directory and times ``check_engine(eng, STEPS, prefill=..., lanes=...)`` alternately with
lanes off and on (``--repeats`` times each), printing every time, the positions and the lane
values compared.

Usage: python benchmarks/check_cost.py [--steps 200] [--repeats 2]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from backends.verify.check import check_engine  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402
from backends.engines.hf import HFEngine  # noqa: E402
from hdl.frontend import load_circuit  # noqa: E402

EXAMPLES = [("counter", "examples/counter/counter.hdl", None),
            ("gcd", "examples/gcd/gcd.hdl", "Gcd"),
            ("stack_machine", "examples/stack_machine/stack_machine.hdl", None)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, top in EXAMPLES:
            d = Path(tmp) / name
            compile_to_dir(load_circuit(ROOT / path, top), d)
            eng = HFEngine(d)
            for prefill in (False, True):
                times: dict[bool, list[float]] = {False: [], True: []}
                for _ in range(a.repeats):
                    for lanes in (False, True):
                        t0 = time.perf_counter()
                        rep = check_engine(eng, a.steps, prefill=prefill, lanes=lanes)
                        times[lanes].append(time.perf_counter() - t0)
                        assert rep.ok, rep.problems()
                mode = "prefill" if prefill else "decode"
                fmt = lambda ts: " ".join(f"{t:.2f}" for t in ts)
                print(f"{name:14} {mode:7} {rep.positions:5} positions, {rep.lane_checks:8,} lane "
                      f"values; s without lanes: {fmt(times[False])}; with: {fmt(times[True])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
