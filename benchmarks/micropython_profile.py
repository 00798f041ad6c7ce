"""MicroPython on the core: where the instructions go, per function, on the golden emulator.

For each program of ``benchmarks/micropython.py`` (or ``--src TEXT``), runs the cached
``micropython.elf`` (or ``--elf``) on ref with the retired trace and maps every retired
instruction's pc to the ELF function holding it:

* **self**: the instructions retired inside the function's own code;
* **total**: self plus everything it called (a shadow call stack: a ``jal``/``jalr`` that
  writes ``ra`` is a call, a ``jalr x0, 0(ra)`` a return; a recursive function counts once
  per outermost activation; ``nlr`` jumps unwind to the frame whose function holds the
  target);
* **calls**: how many times it was entered by a call (a jump to a function's first
  instruction from another function is a tail call: it replaces the caller's frame).

The table is per phase (``--phase start-up|parse|compile|run``, the split of
``benchmarks/micropython.py``) or for the whole run (default).

Usage: python benchmarks/micropython_profile.py [--only NAME] [--src TEXT] [--elf PATH]
       [--phase PHASE] [--top N] [--sort self|total]
"""
from __future__ import annotations

import argparse
import bisect
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from elftools.elf.elffile import ELFFile  # noqa: E402

from cpu.emulator import Machine  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import micropython as bench  # noqa: E402


def functions(elf: Path) -> tuple[list[int], list[str], list[int]]:
    """The ELF's functions sorted by address: starts, names, ends."""
    with open(elf, "rb") as f:
        syms = [(s["st_value"], s["st_size"], s.name)
                for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s.name]
    syms.sort()
    return [a for a, _, _ in syms], [n for _, _, n in syms], [a + max(z, 4) for a, z, _ in syms]


def profile(elf: Path, src: str, phase: str | None = None, callers_of: str | None = None):
    """(self Counter, total Counter, calls Counter, instructions, output, by_caller) on ref;
    ``by_caller``: the total of ``callers_of`` split by the function that called it."""
    starts, names, ends = functions(elf)
    names = [*names]
    marks = [starts[names.index(m)] for m in bench.MARKERS]

    def fn(pc: int) -> int:
        i = bisect.bisect_right(starts, pc) - 1
        return i if i >= 0 and pc < ends[i] else -1

    want = None if phase is None else bench.PHASES.index(phase)
    cur_phase = 0
    selfc: Counter = Counter()
    total: Counter = Counter()
    calls: Counter = Counter()
    by_caller: Counter = Counter()
    watch = names.index(callers_of) if callers_of else None
    stack: list[int] = []            # function indices of the live frames
    active: Counter = Counter()      # how many live frames each function has
    m = Machine.from_elf(elf, src.encode())
    n = 0
    out = b""
    cache: dict[int, int] = {}
    while True:
        r = m.run(1 << 16, trace=True)
        out += r.output
        for rec in r.retired:
            pc = rec.pc
            f = cache.get(pc)
            if f is None:
                f = cache[pc] = fn(pc)
            if want is None or cur_phase == want:
                selfc[f] += 1
                for g in active:
                    total[g] += 1
                if watch is not None and watch in active:
                    j = len(stack) - 1 - stack[::-1].index(watch)
                    by_caller[names[stack[j - 1]] if j > 0 and stack[j - 1] >= 0 else "?"] += 1
            insn = rec.insn
            op = insn & 0x7f
            rd = (insn >> 7) & 0x1f
            nxt = rec.next_pc
            if op in (0x6f, 0x67) and rd == 1:                   # a call
                g = cache.get(nxt)
                if g is None:
                    g = cache[nxt] = fn(nxt)
                stack.append(g)
                active[g] += 1
                if want is None or cur_phase == want:
                    calls[g] += 1
            elif op == 0x67 and rd == 0 and ((insn >> 15) & 0x1f) == 1:   # ret
                if stack:
                    g = stack.pop()
                    active[g] -= 1
                    if not active[g]:
                        del active[g]
            elif op in (0x6f, 0x67) and stack:                   # a jump
                g = cache.get(nxt)
                if g is None:
                    g = cache[nxt] = fn(nxt)
                if g != f and g >= 0 and nxt == starts[g]:      # a tail call
                    h = stack.pop()
                    active[h] -= 1
                    if not active[h]:
                        del active[h]
                    stack.append(g)
                    active[g] += 1
                    if want is None or cur_phase == want:
                        calls[g] += 1
                elif g != f and op == 0x67 and g in active:      # nlr unwinding
                    while stack and stack[-1] != g:
                        h = stack.pop()
                        active[h] -= 1
                        if not active[h]:
                            del active[h]
            if cur_phase < len(marks) and nxt == marks[cur_phase]:
                cur_phase += 1
        n += r.instructions
        if not r.timed_out:
            break
    return selfc, total, calls, n, out, by_caller


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=list(bench.PROGRAMS), help="one program")
    ap.add_argument("--src", help="this program instead")
    ap.add_argument("--elf", type=Path, help="this ELF instead of the cached build")
    ap.add_argument("--phase", choices=bench.PHASES)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--callers", metavar="FUNC", help="also split FUNC's total by its callers")
    ap.add_argument("--sort", choices=("self", "total"), default="self")
    args = ap.parse_args(argv)
    if args.elf is None:
        from firmware.micropython import build as mp_build
        args.elf = mp_build.elf_path()
    _, names, _ = functions(args.elf)
    progs = {"--src": args.src} if args.src else {
        k: v for k, v in bench.PROGRAMS.items() if not args.only or k == args.only}
    for name, src in progs.items():
        selfc, total, calls, n, out, by_caller = profile(args.elf, src, args.phase, args.callers)
        counted = sum(selfc.values())
        print(f"## {name}: {n:,} instructions"
              + (f", {counted:,} in {args.phase}" if args.phase else ""))
        print(f"{'self':>9} {'%':>5} {'total':>9} {'%':>5} {'calls':>7}  function")
        key = selfc if args.sort == "self" else total
        for f, _ in key.most_common(args.top):
            nm = names[f] if f >= 0 else "?"
            print(f"{selfc[f]:9,} {100 * selfc[f] / counted:5.1f} {total[f]:9,} "
                  f"{100 * total[f] / counted:5.1f} {calls[f]:7,}  {nm}")
        if args.callers:
            print(f"\n{args.callers}'s total by caller:")
            for c, k in by_caller.most_common(args.top):
                print(f"{k:9,}  {c}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
