"""What each shipped program's results need from the token protocol: the lower bound that
the width of a result puts on tokens per instruction (docs/cpu.md, "Tokens per instruction").

A retired instruction's result crosses to the next token, which writes it to the register
file (docs/cpu.md, "The token protocol"). A Step carries 13 bits: a result that fits 13 bits
signed, or that keeps rd's upper 19 bits, takes that one token; any other ("wide") takes a
Half before it. So, whatever else the protocol does, a program costs at least 1 + (its share
of wide results) tokens per instruction. The golden emulator's trace gives the shares, and
the same bound for a Step of B bits (``--bits``), the widest the vocabulary could hold.
The wide results are split by the instruction that made them: bitwise (and, or, xor and
their immediates), add (add, addi, sub, sh1add..sh3add), const (lui, auipc: values the loader
knows, since the pc is), shift, mul (the M extension's products and quotients), load.

    python benchmarks/result_widths.py [--programs sum,sieve,...] [--bits 16,18]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.programs import PROGRAMS  # noqa: E402
from cpu.emulator import Machine  # noqa: E402
from cpu.isa import decode, to_signed  # noqa: E402
from firmware import toolchain  # noqa: E402

CLASSES = {"bitwise": {"and", "or", "xor", "andi", "ori", "xori"},
           "add": {"add", "addi", "sub", "sh1add", "sh2add", "sh3add"},
           "const": {"lui", "auipc"},
           "shift": {"sll", "srl", "sra", "slli", "srli", "srai"},
           "mul": {"mul", "mulh", "mulhu", "mulhsu", "div", "divu", "rem", "remu"},
           "load": {"lb", "lh", "lw", "lbu", "lhu"}}


def fits(value: int, bits: int) -> bool:
    """The register value fits ``bits`` bits signed."""
    return -(1 << (bits - 1)) <= to_signed(value) < 1 << (bits - 1)


def keeps(value: int, old: int, bits: int) -> bool:
    """The register value has rd's old value above its low ``bits`` bits."""
    return value >> bits == old >> bits


def one_token(value: int, old: int, bits: int) -> bool:
    """A Step of ``bits`` bits carries it: it fits, or keeps the rest of rd's old value."""
    return fits(value, bits) or keeps(value, old, bits)


def widths(elf: Path, text: bytes | None, bits: list[int]) -> dict:
    """Shares of the run's retired instructions: no register result, one token at 13 bits
    (fits, keeps), wide by class, and wide at each of ``bits``."""
    machine = Machine.from_elf(elf, text)
    regs = list(machine.regs)
    run = machine.run(10 ** 9, trace=True)
    n = len(run.retired)
    out = {"instructions": n, "none": 0, "fits": 0, "keeps": 0, "wide": 0,
           **{c: 0 for c in CLASSES}, "other": 0, **{b: 0 for b in bits}}
    for r in run.retired:
        if r.rd is None:
            out["none"] += 1
            continue
        old, regs[r.rd] = regs[r.rd], r.rd_value
        for b in bits:
            out[b] += not one_token(r.rd_value, old, b)
        if fits(r.rd_value, 13):
            out["fits"] += 1
        elif keeps(r.rd_value, old, 13):
            out["keeps"] += 1
        else:
            out["wide"] += 1
            name = decode(r.insn).name
            out[next((c for c, names in CLASSES.items() if name in names), "other")] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", help="comma-separated names of shipped programs (default: "
                    "benchmarks/fast_engine.py's; 'all': every shipped program)")
    ap.add_argument("--bits", default="16,18", help="wider Steps to bound (default 16,18)")
    a = ap.parse_args()
    bits = [int(b) for b in a.bits.split(",") if b]
    shipped = toolchain.shipped_programs()
    known = {name: (label, name, text, peer) for label, name, text, peer in PROGRAMS}
    names = (list(known) if not a.programs else sorted(shipped) if a.programs == "all"
             else a.programs.split(","))
    unknown = [n for n in names if n not in shipped]
    if unknown:
        sys.exit(f"result_widths: no shipped program {', '.join(unknown)} "
                 f"(shipped: {', '.join(sorted(shipped))})")
    chosen = [known.get(n, (n, n, None, None)) for n in names]
    print(f"{'program':28} {'instr':>8} {'none':>5} {'fits':>5} {'keeps':>5} {'wide':>5} "
          + " ".join(f"{c:>7}" for c in [*CLASSES, "other"]) + "   bound"
          + "".join(f" {'@' + str(b):>6}" for b in bits))
    bounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, text, _ in chosen:
            elf = toolchain.build(shipped[name], Path(tmp) / f"{name}.elf")
            w = widths(elf, text, bits)
            n = w["instructions"]
            bounds.append([1 + w["wide"] / n] + [1 + w[b] / n for b in bits])
            print(f"{label:28} {n:8,} " + " ".join(f"{w[k] / n:5.3f}" for k in
                                                   ("none", "fits", "keeps", "wide"))
                  + " " + " ".join(f"{w[c] / n:7.3f}" for c in [*CLASSES, "other"])
                  + f"   {1 + w['wide'] / n:5.3f}" + "".join(f" {1 + w[b] / n:6.3f}" for b in bits),
                  flush=True)
    means = [sum(col) / len(col) for col in zip(*bounds)]
    print(f"mean of the bounds over these {len(bounds)} programs: {means[0]:.3f} (a 13-bit Step)"
          + "".join(f", {m:.3f} ({b} bits)" for b, m in zip(bits, means[1:])))


if __name__ == "__main__":
    main()
