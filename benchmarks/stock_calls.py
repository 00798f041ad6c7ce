"""Figures of the RISC-V core in the stock layout: the merge, the chip's engines, tool calls.

Builds a tiny random Qwen3.5 base with Qwen3.5-4B's GDN heads and MLP width but hidden 64
(``tests.merge.bases.make_base``: the stock layout needs the core compiled for the base's
module shapes, and the qwen3.5-4b core is the one the core cache holds), merges calc into it
with ``deltachip merge --layout stock --firmware calc`` in a child under ``/usr/bin/time
-v`` (size, time, peak RSS), then, in this process, with one thread:

- the chip path in plain transformers (``StockEngine``: the whole widened model a token) and
  on the fast engine (the chip's tensors cut from the merged files), ``--tokens`` tokens
  of a calc run each, side by side, with the ids compared;
- plain ``generate()`` on text: tokens a second of the merged model and of the base;
- the driver (``StockCalls``, what ``deltachip chat`` runs on a stock merge): a call of
  calc on each ``--call`` expression, from the program's start and then resumed.

    python benchmarks/stock_calls.py --call '2**100' --call '2**64'
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def merge(d: Path) -> Path:
    from tests.merge.bases import make_base
    base = make_base(d / "base", tied=True, seed=5, intermediate=9216)
    out = d / "merged"
    r = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "deltachip", "merge",
                        str(base), str(out), "--firmware", "calc", "--layout", "stock"],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"merge failed ({r.returncode}):\n{r.stdout}{r.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", r.stderr).group(1)
    size = lambda p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())  # noqa: E731
    print(r.stdout.strip())
    print(f"base {size(base):,} bytes; stock merge with calc {size(out):,} bytes; merge: wall "
          f"{wall}, peak RSS {rss / 1024:.0f} MiB")
    return out


def engines(out: Path, tokens: int) -> None:
    from backends.engines.fast.engine import FastEngine
    from backends.engines.merged import open_merged
    from cpu.rv32.build import FULL
    from cpu.rv32.loader import load_program
    from firmware import toolchain
    elf = toolchain.build(toolchain.shipped_programs()["calc"], out.parent / "calc.elf")
    roms = load_program(elf, b"2**100", FULL).images
    hf, fast = open_merged(out, roms=roms), FastEngine(out, roms=roms, threads=1)
    runs = {}
    for name, eng in (("hf (plain transformers, StockEngine)", hf), ("fast", fast)):
        cache, tok, ids = eng.new_cache(1), eng.token_id(eng.circuit.start), []
        t = time.perf_counter()
        for _ in range(tokens):
            tok = int(eng.decode_step([tok], cache)[0])
            ids.append(tok)
        runs[name] = ids
        s = time.perf_counter() - t
        print(f"chip path, {name}: {tokens} tokens in {s:.2f} s, {s / tokens * 1e3:.2f} ms a "
              f"token")
    a, b = runs.values()
    print(f"the two engines' ids: {'equal' if a == b else 'DIFFERENT'} on {tokens} tokens")


def text_rate(path: Path, n: int) -> float:
    from backends.engines.hf import load_checked
    m = load_checked(path, torch.bfloat16, "")
    ids = torch.tensor([[5, 6, 7, 8]])
    m.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)
    t = time.perf_counter()
    g = m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return (g.shape[1] - ids.shape[1]) / (time.perf_counter() - t)


def calls(out: Path, exprs: list[str]) -> None:
    from backends.engines.hf import load_checked
    from backends.merge.stock_calls import StockCalls
    from transformers import AutoTokenizer
    m = load_checked(out, torch.bfloat16, "")
    drv = StockCalls(out, m)
    tok = AutoTokenizer.from_pretrained(str(out))
    for expr in exprs:
        call = json.dumps({"name": "calc", "arguments": {"expression": expr}})
        drv.state.parked = None
        for what in ("from the start", "resumed"):
            ids = tok("<|im_start|>assistant\n<tool_call>\n" + call + "\n</tool_call>",
                      return_tensors="pt").input_ids
            t = time.perf_counter()
            drv.generate(ids, max_new_tokens=len(expr) * 2 + 40, do_sample=False,
                         pad_token_id=0)
            r = drv.state.log[-1]
            print(f"call {expr!r} {what}: {r['output'].strip()!r}: chip {r['tokens']:,} "
                  f"tokens, {r['instructions']:,} instructions, {r['seconds']:.2f} s on "
                  f"{r['engine']}; the driver's generate() {time.perf_counter() - t:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/stock-calls"))
    ap.add_argument("--tokens", type=int, default=200, help="chip tokens per engine")
    ap.add_argument("--text-tokens", type=int, default=32)
    ap.add_argument("--call", action="append", default=[], metavar="EXPR")
    a = ap.parse_args()
    torch.set_num_threads(1)
    shutil.rmtree(a.dir, ignore_errors=True)
    a.dir.mkdir(parents=True)
    out = merge(a.dir)
    engines(out, a.tokens)
    print(f"text, plain generate(): base {text_rate(a.dir / 'base', a.text_tokens):.1f} "
          f"tokens/s, stock merge {text_rate(out, a.text_tokens):.1f} tokens/s")
    calls(out, a.call or ["2**100"])


if __name__ == "__main__":
    main()
