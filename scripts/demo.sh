#!/usr/bin/env bash
# The main job, end to end, on a fresh machine: set up .venv, then
#   1. simulate a circuit written in the language (reference simulator),
#   2. compile it into a Qwen3.5 checkpoint and check the weights against the simulator,
#      position by position, inside transformers' own modules (bf16), and trace weights
#      back to a source line,
#   3. build the C calculator for the RISC-V machine and run it on the golden ISA emulator,
#   4. compile the shipped RV32IM+Zba core (cpu/rv32/*.hdl) into Qwen3.5 layers and run C
#      programs inside them on the fast engine (the checkpoint's own weights, run sparsely,
#      bit-identical to transformers): one token per clock step, the UART bytes read back
#      from the tokens; then the first positions of the same trace through transformers' own
#      modules beside the fast engine, every residual value compared. The compiled core
#      (6 GB, compact shapes, bf16) is cached in $DELTACHIP_CACHE/cores (default
#      ~/.cache/deltachip/cores): only the first run compiles.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
out=build/demo
mkdir -p "$out"

echo "== 1. simulate examples/gcd/gcd.hdl"
deltachip sim examples/gcd/gcd.hdl --steps 100

echo "== 2. compile it into Qwen3.5 weights and check them in transformers"
deltachip compile examples/gcd/gcd.hdl -o "$out/gcd" --target compact --dtype bf16
deltachip check "$out/gcd" --steps 40 --start 'Step a=144 b=233'
echo "-- where did the divider's 'if' go, at what cost (every weight is traced to its line)"
deltachip explain "$out/gcd" --source stdlib/muldiv.hdl:90

echo "== 3. C on the RISC-V machine: calc"
deltachip firmware build calc -o "$out/calc.elf" -O2
for expr in '2**100' '-7 // 2' '(1/3 + 1/6) * 4'; do
  printf '%s = ' "$expr"
  deltachip run "$out/calc.elf" --input "$expr"
done

echo "== 4. C inside Qwen3.5 layers: the RISC-V core compiled, running firmware/programs/product.c"
deltachip firmware build firmware/programs/product.c -o "$out/product.elf" -O2
echo "-- the core in the reference simulator (engine sim): 12345 * 6789 ="
deltachip run "$out/product.elf" --engine sim
echo "-- the core compiled into Qwen3.5 layers, on the fast engine: 12345 * 6789 ="
deltachip run "$out/product.elf" --engine fast --target compact --stats "$out/product-fast.json"
python - "$out/product-fast.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"-- {s['instructions']} instructions in {s['tokens']} tokens "
      f"({s['tokens_per_instruction']} per instruction) through {s['layers']} layers, "
      f"{s['seconds']:.2f} s; exit code {s['exit_code']}")
PY
echo "-- calc inside the layers (fast engine): 2**100 ="
deltachip run "$out/calc.elf" --engine fast --target compact --input '2**100'
echo "-- the same product trace in transformers' own Qwen3.5 modules beside the fast engine"
python - "$out/product.elf" <<'PY'
import sys, time
from pathlib import Path
from transformers.utils import logging
from backends.verify.check import compare_engines, load_engine
from cpu.rv32.engines import compiled_core
from cpu.rv32.loader import load_program
logging.disable_progress_bar()
image = load_program(Path(sys.argv[1]), None)
fast, hf = (load_engine(e, compiled_core(), roms=image.images) for e in ("fast", "hf"))
t0 = time.perf_counter()
rep = compare_engines(fast, hf, steps=24, starts=[image.start], mem_every=8)
print(f"-- {'OK' if rep.ok else 'FAILED'}: fast = hf on the first {rep.positions} positions: "
      f"every next token, {rep.lane_checks:,} residual values after every sublayer, "
      f"{rep.memory_checks} memory comparisons ({time.perf_counter() - t0:.0f} s)")
sys.exit(0 if rep.ok else 1)
PY
