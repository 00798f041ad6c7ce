"""MicroPython on the core: instructions and fast-engine seconds for three small programs.

The programs (:data:`PROGRAMS`): ``print(2**100)``; a 10-line loop-and-list script; a
30-line script with functions and a class. For each: the instructions the golden emulator
(``ref``) retires, split into where they go, found from the ELF's symbols on the retired
trace:

* start-up: ``_start`` up to the lexer (``mp_lexer_new_from_str_len``): crt0, ``gc_init``,
  ``mp_init``;
* parse: up to ``mp_compile`` (lexer and parser: the parse tree);
* compile: up to the module's call (``mp_call_function_0``: scopes, bytecode);
* run: the program's own execution, to the exit (``mp_deinit`` included);

then the seconds the fast engine (the compiled core, one stream, one thread, the engine
loaded once beforehand and its load time given apart) takes to run it, with its output and
instruction count checked against ref's. The machine's CPU is named in the output.

Usage: python benchmarks/micropython.py [--target compact|qwen3.5-4b] [--dtype bf16]
       [--no-fast] [--only NAME] [--repeat N]
"""
from __future__ import annotations

import argparse
import bisect
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from elftools.elf.elffile import ELFFile  # noqa: E402

from cpu.emulator import Machine  # noqa: E402
from firmware.micropython import build as mp_build  # noqa: E402

PROGRAMS = {
    "print(2**100)": "print(2**100)\n",
    "loop (10 lines)": """\
squares = []
for i in range(20):
    squares.append(i * i)
evens = [s for s in squares if s % 2 == 0]
total = 0
for s in evens:
    total += s
print(len(squares), total)
print(evens[:5], max(squares))
print(sum(squares) // len(squares))
""",
    "class (30 lines)": """\
def gcd(a, b):
    while b:
        a, b = b, a % b
    return a

def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True

class Fraction:
    def __init__(self, num, den):
        g = gcd(num, den)
        self.num, self.den = num // g, den // g

    def __add__(self, other):
        return Fraction(self.num * other.den + other.num * self.den,
                        self.den * other.den)

    def __repr__(self):
        return "%d/%d" % (self.num, self.den)

h = Fraction(0, 1)
for k in range(1, 11):
    h = h + Fraction(1, k)
print(h, [p for p in range(30) if is_prime(p)])
""",
}

#: the functions whose first entry ends a phase: start-up, parse, compile; run is the rest
MARKERS = ("mp_lexer_new_from_str_len", "mp_compile", "mp_call_function_0")
PHASES = ("start-up", "parse", "compile", "run")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def symbols(elf: Path) -> dict[str, int]:
    with open(elf, "rb") as f:
        return {s.name: s["st_value"] for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC"}


def phases(elf: Path, src: str) -> tuple[dict[str, int], bytes]:
    """Instructions per phase (see the module's docstring) and the output, on ref."""
    syms = symbols(elf)
    marks = [syms[name] for name in MARKERS]
    m = Machine.from_elf(elf, src.encode())
    at: list[int] = []
    n = 0
    out = b""
    while True:
        r = m.run(1 << 18, trace=len(at) < len(marks))
        out += r.output
        if r.retired is not None:
            for i, rec in enumerate(r.retired):
                if len(at) < len(marks) and rec.next_pc == marks[len(at)]:
                    at.append(n + i + 1)
        n += r.instructions
        if not r.timed_out:
            break
    assert r.exit_code == 0 and len(at) == len(marks), (r.exit_code, r.fault, at)
    bounds = [0, *at, n]
    return {p: bounds[i + 1] - bounds[i] for i, p in enumerate(PHASES)}, out


def run_fast(eng, elf: Path, src: str, target: str):
    from cpu.rv32.engines import CoreBatch
    from cpu.rv32.loader import load_program
    batch = CoreBatch([load_program(elf, src.encode())], "fast", target=target, threads=1,
                      eng=eng)
    t0 = time.perf_counter()
    r = batch.run(50_000_000)[0]
    return r, time.perf_counter() - t0, batch.counters()["tokens"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="compact")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--no-fast", action="store_true", help="ref's instruction counts only")
    ap.add_argument("--only", choices=list(PROGRAMS), help="one program")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs on fast per program; the median is shown (default 1)")
    args = ap.parse_args(argv)
    elf = mp_build.elf_path()
    print(f"MicroPython {mp_build.VERSION}: {elf}; CPU: {cpu_name()}")
    eng = None
    if not args.no_fast:
        from cpu.rv32.engines import batch_engine
        t0 = time.perf_counter()
        eng = batch_engine("fast", args.target, args.dtype)
        print(f"fast engine ({args.target}, {args.dtype}) loaded in {time.perf_counter() - t0:.1f} s")
    print("| program | lines | instructions (ref) | start-up | parse | compile | run | "
          "fast s | tokens | instructions/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, src in PROGRAMS.items():
        if args.only and name != args.only:
            continue
        ph, out = phases(elf, src)
        total = sum(ph.values())
        fast_s = tokens = rate = "—"
        if eng is not None:
            times = []
            for _ in range(max(1, args.repeat)):
                r, secs, tok = run_fast(eng, elf, src, args.target)
                assert (r.output, r.exit_code, r.instructions) == (out, 0, total), (name, r)
                times.append(secs)
            secs = statistics.median(times)
            fast_s, tokens, rate = f"{secs:.1f}", f"{tok:,}", f"{total / secs:,.0f}"
            if len(times) > 1:
                fast_s += f" (median of {len(times)}: {min(times):.1f}–{max(times):.1f})"
        print(f"| `{name}` | {src.count(chr(10))} | {total:,} | "
              + " | ".join(f"{ph[p]:,}" for p in PHASES)
              + f" | {fast_s} | {tokens} | {rate} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
