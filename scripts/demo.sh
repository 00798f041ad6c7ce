#!/usr/bin/env bash
# The main job, end to end, on a fresh machine: set up .venv, then
#   1. simulate a circuit written in the language (reference simulator),
#   2. compile it into a Qwen3.5 checkpoint and check the weights against the simulator,
#      position by position, inside transformers' own modules (bf16),
#   3. build the C calculator for the RISC-V machine and run it on the golden ISA emulator.
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

echo "== 3. C on the RISC-V machine: calc"
deltachip firmware build calc -o "$out/calc.elf" -O2
for expr in '2**100' '-7 // 2' '(1/3 + 1/6) * 4'; do
  printf '%s = ' "$expr"
  deltachip run "$out/calc.elf" --input "$expr"
done
