"""MicroPython on the core: do two builds behave the same? Output and exit code, program by program.

The port's speed edits to MicroPython's ``py/`` sources (``firmware/micropython/patches.py``)
must not change the language: this runs two ELFs (``--old``, ``--new``; the new one is the
cached build by default) on ref over

* the test set (``tests/firmware/test_micropython.py``'s programs) and the benchmark's three
  programs (``benchmarks/micropython.py``);
* short programs that end in errors: exceptions, ``sys.exit``, syntax and indentation errors,
  endless recursion, ``MemoryError``, a runaway loop (cut at the step budget);
* malformed programs made from those sources (deterministic, ``--seed``): each cut short at
  a few places, with one character deleted or one token inserted at a few places, its lines'
  indentation broken;

and compares, for each, the bytes printed, the exit code, and whether the run faulted or ran
out of steps. Instruction counts are printed as a sum (they are expected to differ).

Usage: python benchmarks/micropython_equivalence.py --old OLD.elf [--new NEW.elf]
       [--malformed N] [--seed S] [--max-steps N]
Exit status 0 when every program behaves the same on both, 1 otherwise (the differences are
printed).
"""
from __future__ import annotations

import argparse
import random
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu.emulator import Machine  # noqa: E402

import micropython as bench  # noqa: E402

#: programs that end in an error, or test an edge of the lexer and parser
EDGE: dict[str, str] = {
    "zerodiv": "def f(x):\n    return 1 // x\nprint('before')\nf(0)\nprint('after')\n",
    "syntax": "print(1\n",
    "name": "print(undefined_name)\n",
    "exit7": "import sys\nprint('x')\nsys.exit(7)\n",
    "exit0": "import sys\nsys.exit()\n",
    "systemexit": "raise SystemExit('bye')\n",
    "recursion": "def down(n):\n    return down(n + 1)\ntry:\n    down(0)\n"
                 "except RuntimeError as e:\n    print('caught', type(e).__name__)\n",
    "memory": "try:\n    x = [0] * 100000\nexcept MemoryError:\n    print('no room')\n",
    "runaway": "while True:\n    pass\n",
    "empty": "",
    "indent": "if 1:\n    x = 1\n      y = 2\n",
    "dedent": "if 1:\n        x = 1\n    y = 2\n",
    "unexpected_indent": "  x = 1\n",
    "eof_in_block": "def f():\n",
    "crlf": "x = 1\r\nif x:\r\n    print('crlf', x)\r\n",
    "cr": "x = 2\rprint('cr', x)\r",
    "tabs": "if 1:\n\tx = 3\n\tprint('tab', x)\n",
    "continuation": "x = 1 + \\\n    2\nprint(x, (3 +\n 4), [5,\n6])\n",
    "comments": "# a comment\nx = 1  # another\n\n   # indented comment\nprint(x)\n",
    "no_newline": "print('end')",
    "invalid_byte": "print('a')\x01\n",
    "strings": "print('a' 'b', \"c\" 'd', '''e\nf''', r'\\n', b'x' b'y', f'{1+1}', "
               "'\\x41\\u00e9')\n",
    "numbers": "print(0x1F, 0o17, 0b101, 1_000, 1.5e3, 2j if False else 0, 1e-2, .5, 5.)\n",
    "operators": "a = 5\na += 1; a -= 2; a *= 3; a //= 2; a %= 7; a **= 2; a <<= 1; a >>= 1\n"
                 "a |= 8; a &= 12; a ^= 3\nprint(a, a < 3 <= 4 != 5, not a, -a, ~a, +a, a @ 1 "
                 "if False else 0)\n",
    "walrus": "if (n := 10) > 5:\n    print(n)\nprint([y for x in range(3) if (y := x * 2)])\n",
    "lambda": "f = lambda x, *a, k=2, **kw: (x, a, k, kw)\nprint(f(1, 2, k=3, z=4))\n",
    "slices": "l = list(range(10))\nprint(l[1:8:2], l[::-1], l[:], l[-3:], l[1:-1])\n",
    "keywords": "x = None\nprint(True and False or not None, x is None, 1 in [1], 2 not in [1])\n"
                "del x\nglobal y\nassert True\npass\n",
    "bad_token": "x = 1 $ 2\n",
    "bad_string": "x = 'unterminated\n",
    "bad_fstring": "print(f'{')\n",
    "keyword_as_name": "class = 1\n",
    "debug": "print(__debug__)\n",
    "const": "from micropython import const\nX = const(3)\nprint(X * 2)\n",
    "docstring": "def f():\n    'doc'\n    return 1\n'module doc'\n12\nprint(f())\n",
    "nested": "print([[[[[(((((1,),),),),)]]]]], {1: {2: {3: (4,)}}})\n",
    "unicode_name": "\u00e9t\u00e9 = 5\nprint(\u00e9t\u00e9)\n",
    "decorator": "def d(f):\n    return f\n@d\ndef g():\n    return 'g'\nprint(g())\n",
    "with_try": "try:\n    raise ValueError('v')\nexcept (TypeError, ValueError) as e:\n"
                "    print('caught')\nelse:\n    pass\nfinally:\n    print('fin')\n",
    "async": "async def f():\n    await g()\nprint(type(f).__name__)\n",
    "star": "a, *b = [1, 2, 3]\nprint(a, b, *b, [*b, 4], {**{'k': 1}})\n",
}

#: tokens inserted into the malformed programs
INSERTS = ("(", ")", "[", "]", ":", ",", "=", " else ", " if ", "\n", "    ", "'", "\\", "lambda",
           ".", "**", "not", "@", ";", "0x", "1.", "{", "}", "def ", "return ", "yield", "->")


def test_set() -> dict[str, str]:
    try:
        from tests.firmware.test_micropython import PROGRAMS
    except ImportError:                     # pytest absent: the benchmark's programs only
        return {}
    return {name: textwrap.dedent(src).lstrip("\n") for name, src in PROGRAMS.items()}


def malformed(sources: dict[str, str], n: int, seed: int) -> dict[str, str]:
    """``n`` broken variants of the sources (fewer when a source is short), deterministic."""
    rnd = random.Random(seed)
    names = sorted(sources)
    out: dict[str, str] = {}
    k = 0
    while len(out) < n and k < 20 * n:
        k += 1
        name = names[k % len(names)]
        src = sources[name]
        if len(src) < 2:
            continue
        kind = k % 4
        at = rnd.randrange(1, len(src))
        if kind == 0:
            new, what = src[:at], f"cut at {at}"
        elif kind == 1:
            new, what = src[:at] + src[at + 1:], f"char {at} deleted"
        elif kind == 2:
            tok = INSERTS[rnd.randrange(len(INSERTS))]
            new, what = src[:at] + tok + src[at:], f"{tok!r} inserted at {at}"
        else:
            lines = src.split("\n")
            j = rnd.randrange(len(lines))
            lines[j] = (" " * rnd.choice((1, 2, 3, 5, 8))) + lines[j].lstrip(" ")
            new, what = "\n".join(lines), f"line {j + 1} indented"
        if len(new.encode()) < 1024 and new != src:
            out[f"{name}: {what}"] = new
    return out


def run(elf: Path, src: str, max_steps: int):
    r = Machine.from_elf(elf, src.encode()).run(max_steps)
    return (r.output, r.exit_code, r.fault is not None, bool(r.timed_out)), r.instructions


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True, help="the reference build's ELF")
    ap.add_argument("--new", type=Path, help="the build to check (default: the cached build)")
    ap.add_argument("--malformed", type=int, default=200, help="how many malformed programs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=5_000_000)
    args = ap.parse_args(argv)
    if args.new is None:
        from firmware.micropython import build as mp_build
        args.new = mp_build.elf_path()
    sources = {**test_set(), **{f"bench {k}": v for k, v in bench.PROGRAMS.items()}}
    programs = {**sources, **{f"edge {k}": v for k, v in EDGE.items()}}
    programs.update({f"malformed {k}": v for k, v in
                     malformed({**sources, **EDGE}, args.malformed, args.seed).items()})
    bad = 0
    totals = [0, 0]
    for name, src in programs.items():
        old, n_old = run(args.old, src, args.max_steps)
        new, n_new = run(args.new, src, args.max_steps)
        totals[0] += n_old
        totals[1] += n_new
        if old != new:
            bad += 1
            print(f"DIFFERENT: {name}\n  source: {src!r}\n  old: {old}\n  new: {new}")
    print(f"{len(programs)} programs ({len(sources)} test and benchmark programs, {len(EDGE)} "
          f"edge cases, {len(programs) - len(sources) - len(EDGE)} malformed): "
          f"{len(programs) - bad} the same, {bad} different; instructions {totals[0]:,} -> "
          f"{totals[1]:,}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
