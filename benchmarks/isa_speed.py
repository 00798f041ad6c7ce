"""Measure the ISA emulator's speed (instructions/s, single thread, no trace).

Runs a hand-assembled workload (an LCG filling 1,024 RAM words with mul/sh2add/sw, then a
checksum pass with lw/lbu/shifts/xor/branches, forever) or any ELF given with ``--elf``, for
``--steps`` instructions, ``--repeat`` times, and prints the median rate. With ``--trace``
it measures the traced path instead.

    python benchmarks/isa_speed.py [--steps 2000000] [--repeat 5] [--elf PROG.elf] [--trace]
"""
from __future__ import annotations

import argparse
import statistics
import time

from cpu.emulator import Machine
from cpu.isa import assemble

S0, S1, T0, T1, T2, T3, T4, T5, A0 = 8, 9, 5, 6, 7, 28, 29, 30, 10

WORKLOAD = [
    ("lui", dict(rd=S0, imm=0x80)),                  # s0 = RAM base
    ("addi", dict(rd=S1, imm=1024)),                 # s1 = words
    ("addi", dict(rd=T0, imm=1234)),                 # t0 = seed
    ("lui", dict(rd=T1, imm=0x19660)),
    ("addi", dict(rd=T1, rs1=T1, imm=0x00D)),        # t1 = 1664525
    "outer",
    ("addi", dict(rd=T2, imm=0)),
    "fill",
    ("mul", dict(rd=T0, rs1=T0, rs2=T1)),
    ("addi", dict(rd=T0, rs1=T0, imm=1)),
    ("sh2add", dict(rd=T3, rs1=T2, rs2=S0)),
    ("sw", dict(rs1=T3, rs2=T0, imm=0)),
    ("addi", dict(rd=T2, rs1=T2, imm=1)),
    ("bne", dict(rs1=T2, rs2=S1, imm="fill")),
    ("addi", dict(rd=T2, imm=0)),
    ("addi", dict(rd=A0, imm=0)),
    "sum",
    ("sh2add", dict(rd=T3, rs1=T2, rs2=S0)),
    ("lw", dict(rd=T4, rs1=T3, imm=0)),
    ("srli", dict(rd=T4, rs1=T4, imm=3)),
    ("xor", dict(rd=A0, rs1=A0, rs2=T4)),
    ("lbu", dict(rd=T5, rs1=T3, imm=1)),
    ("add", dict(rd=A0, rs1=A0, rs2=T5)),
    ("addi", dict(rd=T2, rs1=T2, imm=1)),
    ("bltu", dict(rs1=T2, rs2=S1, imm="sum")),
    ("jal", dict(rd=0, imm="outer")),
]


def measure(make: "callable", steps: int, repeat: int, trace: bool) -> list[float]:
    """Run ``make().run(steps)`` ``repeat`` times; return instructions/s of each run."""
    rates = []
    for _ in range(repeat):
        m = make()
        t0 = time.perf_counter()
        r = m.run(steps, trace=trace)
        dt = time.perf_counter() - t0
        rates.append(r.instructions / dt)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--elf", help="benchmark this program instead of the built-in workload")
    ap.add_argument("--trace", action="store_true", help="measure the traced path")
    args = ap.parse_args()
    if args.elf:
        def make() -> Machine:
            return Machine.from_elf(args.elf)
    else:
        words = assemble(WORKLOAD)

        def make() -> Machine:
            m = Machine()
            m.load_words(words)
            return m
    rates = measure(make, args.steps, args.repeat, args.trace)
    print(f"ref engine{' (trace)' if args.trace else ''}: median {statistics.median(rates):,.0f} "
          f"instructions/s over {args.repeat} runs of {args.steps:,} "
          f"(min {min(rates):,.0f}, max {max(rates):,.0f})")


if __name__ == "__main__":
    main()
