"""The backend's figures: what each example compiles to, how long that takes, how fast it runs.

Compiles every example (examples/*/<name>.hdl) for each target and prints one row per
(example, target): IR nodes, chip layers, lanes, hidden width, MLP neurons (the sum over
layers of the neurons the circuit uses), GDN key heads used by memories (and the value heads
of the checkpoint), nonzero weights, compile seconds (``compile_to_dir``, writing included)
and transformers decode steps/s at batch 1 (engine "hf": one ``decode_step`` per token,
feeding back the model's own next token; the median of ``--repeats`` runs of ``--steps``
steps). Then the compile time of a random ~``--nodes``-node circuit (tests/hdl/ir_fuzz.py:
every value op except memory reads, widths up to 8, one token kind of <= 16 payload bits),
against the issue's target of <= 10 s for ~1,000 nodes.

A fixed-shape target (qwen3.5-4b) is skipped for a circuit whose estimated peak memory
(tests/backends/wrappers.estimated_gb) exceeds ``--mem-gb``; the row says so.

Usage: python benchmarks/backend_figures.py [--targets compact,qwen3.5-4b] [--dtype bf16]
       [--steps 32] [--repeats 3] [--nodes 1000] [--seed 7] [--mem-gb 6]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "backends"))

import torch  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

import wrappers  # noqa: E402
from hdl.frontend import load_circuit  # noqa: E402
from hdl.ir import Circuit, Op  # noqa: E402
from backends.compile.pipeline import compile_circuit, compile_to_dir  # noqa: E402
from backends.engines.hf import HFEngine  # noqa: E402
from tests.hdl.ir_fuzz import ALL_OPS, random_circuit  # noqa: E402

hf_logging.disable_progress_bar()

COLUMNS = ("example", "target", "nodes", "layers", "lanes", "hidden", "MLP neurons",
           "GDN heads k/v", "nonzero weights", "compile s", "decode steps/s")


def decode_rate(path: Path, steps: int, repeats: int) -> float:
    """Median decode steps/s (batch 1) of the chip in ``path`` over ``repeats`` runs."""
    eng = HFEngine(path)
    c = eng.circuit
    assert c.start is not None
    rates = []
    for _ in range(repeats + 1):          # the first run warms up and is dropped
        cache = eng.new_cache(1)
        tid = eng.token_id(c.start)
        t0 = time.perf_counter()
        for _ in range(steps):
            tid = int(eng.decode_step([tid], cache)[0])
        rates.append(steps / (time.perf_counter() - t0))
    return statistics.median(rates[1:])


def figures(name: str, c: Circuit, target: str, dtype: str, steps: int, repeats: int,
            mem_gb: float) -> list[str]:
    """One table row for circuit ``c`` compiled for ``target``."""
    gb = wrappers.estimated_gb(c, target, dtype)
    if gb > mem_gb:
        return [name, target, str(len(c.nodes)),
                f"skipped: needs ~{gb:.0f} GB to load (dense weights), over --mem-gb {mem_gb:g}"]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        comp = compile_to_dir(c, Path(tmp) / "chip", target=target, dtype=dtype)
        secs = time.perf_counter() - t0
        chip = comp.chip
        del comp
        rate = decode_rate(Path(tmp) / "chip", steps, repeats)
    sh = chip["shapes"]
    neurons = sum(layer["neurons"] for layer in chip["layers"])
    kheads = sum(layer["key_heads"] for layer in chip["layers"])
    vper = sh["value_heads"] // max(1, sh["key_heads"])
    return [name, target, str(len(c.nodes)), str(sh["layers"]), str(chip["lanes"]["count"]),
            str(sh["hidden"]), str(neurons), f"{kheads}/{kheads * vper}",
            f"{chip['nonzero_weights']:,}", f"{secs:.1f}", f"{rate:.1f}"]


def print_table(rows: list[list[str]]) -> None:
    full = [r for r in rows if len(r) == len(COLUMNS)]
    widths = [max(len(h), *(len(r[i]) for r in full)) if full else len(h)
              for i, h in enumerate(COLUMNS)]
    print("  ".join(h.rjust(w) for h, w in zip(COLUMNS, widths)))
    for r in rows:
        if len(r) == len(COLUMNS):
            print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
        else:
            print("  ".join(v.rjust(w) for v, w in zip(r[:3], widths)) + "  " + r[3])


def random_compile(nodes: int, seed: int, dtype: str) -> str:
    """Compile seconds of a random ~``nodes``-node circuit (the first seed from ``seed``
    whose token payload is 8..16 bits)."""
    for s in range(seed, seed + 200):
        rng = random.Random(s)
        c = random_circuit(rng, n_nodes=nodes, max_width=8, n_kinds=1, n_memories=0,
                           ops=ALL_OPS - {Op.MEM_READ})
        if 8 <= c.kinds[0].payload_bits <= 16:
            break
    t0 = time.perf_counter()
    comp = compile_circuit(c, "compact", dtype)
    secs = time.perf_counter() - t0
    sh = comp.chip["shapes"]
    return (f"random circuit (ir_fuzz seed {s}): {len(c.nodes)} nodes -> {sh['layers']} layers, "
            f"hidden {sh['hidden']}, {comp.chip['nonzero_weights']:,} nonzero weights; "
            f"compile {secs:.1f} s for compact/{dtype} (target <= 10 s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="compact,qwen3.5-4b")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--mem-gb", type=float, default=6.0,
                    help="skip fixed-shape targets whose estimated peak memory is higher")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = []
    for d in sorted(p for p in (ROOT / "examples").iterdir() if (p / f"{p.name}.hdl").is_file()):
        c = load_circuit(d / f"{d.name}.hdl")
        for target in a.targets.split(","):
            rows.append(figures(d.name, c, target, a.dtype, a.steps, a.repeats, a.mem_gb))
            print(" ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"dtype {a.dtype}, torch threads {a.threads}, decode: median of {a.repeats} runs "
          f"of {a.steps} steps")
    print_table(rows)
    if a.nodes:
        print(random_compile(a.nodes, a.seed, a.dtype))


if __name__ == "__main__":
    main()
