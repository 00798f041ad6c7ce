"""The scale figures: a 64K-word ROM and an 8K-word RAM on qwen3.5-4b module shapes.

Compiles tests/backends/compile/test_scale.py's circuit (Go(pc): reads code[pc] and data[pc mod 8K],
writes data) for ``--target`` in ``--dtype``, then runs ``check`` in transformers for
``--steps`` decode steps, reading every memory back from the recurrent state every
``--mem-every`` steps. Prints layers, hidden, banks per memory, compile seconds, checkpoint
bytes, check seconds, mismatches and the peak resident memory of this process (VmHWM).

Usage: python benchmarks/scale_figures.py [--target qwen3.5-4b] [--dtype bf16] [--steps 40]
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "backends"))

import torch  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from backends.verify.check import check_dir  # noqa: E402
from backends.compile.pipeline import compile_to_dir  # noqa: E402
from test_scale import scale_circuit  # noqa: E402

hf_logging.disable_progress_bar()


def peak_gb() -> float:
    m = re.search(r"VmHWM:\s*(\d+) kB", Path("/proc/self/status").read_text())
    return int(m.group(1)) / 1e6 if m else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen3.5-4b")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--mem-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    c = scale_circuit()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scale"
        t0 = time.perf_counter()
        comp = compile_to_dir(c, out, target=a.target, dtype=a.dtype)
        t_compile = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in out.iterdir())
        compile_peak = peak_gb()
        t0 = time.perf_counter()
        rep = check_dir(out, steps=a.steps, mem_every=a.mem_every)
        t_check = time.perf_counter() - t0
    sh, mems = comp.chip["shapes"], comp.chip["memories"]
    print(f"target {a.target}, dtype {a.dtype}: {sh['layers']} layers, hidden {sh['hidden']}")
    for name, m in mems.items():
        print(f"  {name}: {m['kind']} {m['depth']} x {m['width']} bits, {len(m['banks'])} banks, "
              f"layers {m['layer']}..{m['last_layer']}, {1 << m['pack']} word(s) per row")
    print(f"compile {t_compile:.1f} s, checkpoint {size / 1e9:.2f} GB, peak {compile_peak:.2f} GB")
    print(f"check: {rep.positions} positions, {rep.memory_checks} memory read-backs, "
          f"{len(rep.mismatches)} mismatches, {t_check:.1f} s; peak {peak_gb():.2f} GB")
    sys.exit(0 if rep.ok else 1)


if __name__ == "__main__":
    main()
