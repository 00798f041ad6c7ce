#!/usr/bin/env bash
# The main job, end to end, on a fresh machine: set up .venv, then
#   1. simulate a circuit written in the language (reference simulator),
#   2. compile it into a Qwen3.5 checkpoint and check the weights against the simulator,
#      position by position, inside transformers' own modules (bf16), and trace weights
#      back to a source line,
#   3. build the C calculator for the RISC-V machine and run it on the golden ISA emulator,
#   4. compile the shipped RV32IM+Zba core (cpu/rv32/*.hdl) into Qwen3.5 layers and run a C
#      program inside them, in transformers: one token per clock step, the UART bytes read
#      back from the tokens. The compiled core (5.7 GB, compact shapes, bf16; about 0.25 s per token) is cached in
#      $DELTACHIP_CACHE/cores (default ~/.cache/deltachip/cores): only the first run compiles.
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
echo "-- the core compiled into Qwen3.5 layers, run in transformers (engine hf): 12345 * 6789 ="
deltachip run "$out/product.elf" --engine hf --target compact --stats "$out/product-hf.json"
python - "$out/product-hf.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"-- {s['instructions']} instructions in {s['tokens']} tokens "
      f"({s['tokens_per_instruction']} per instruction) through {s['layers']} layers, "
      f"{s['seconds']:.0f} s; exit code {s['exit_code']}")
PY
