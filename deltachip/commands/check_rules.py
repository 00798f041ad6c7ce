"""``deltachip check-rules``: is a circuit that simulates known to compile?

Takes: a ``.hdl`` file (its top circuit or ``--top NAME``), a target and a dtype. Gives: one
line on stdout saying what the circuit would compile to, exit 0; or every rule it breaks
(the depth rule, the vocabulary limit, the target's budgets, the exactness proof), located
in the source, exit 2. It runs the checks of ``deltachip compile``
(:func:`backends.compile.pipeline.check_rules`) without building a weight.
"""
from __future__ import annotations

import argparse

from common.errors import UserError

DESCRIPTION = """Check that a circuit follows every rule `deltachip compile` enforces (the depth
rule, the vocabulary limit, the target's budgets, the exactness proof) without writing weights:
a design that passes compiles."""

EPILOG = """examples:
  deltachip check-rules examples/gcd/gcd.hdl
  deltachip check-rules examples/stack_machine/stack_machine.hdl --target qwen3.5-4b

The rules: docs/language.md, "Compile rules". Exit 0 when the circuit compiles, 2 otherwise.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check-rules", help="check that a circuit will compile",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE.hdl", help="the source file")
    p.add_argument("--top", metavar="NAME", help="the circuit (default: the file's top)")
    p.add_argument("--target", default="compact", metavar="compact|qwen3.5-4b|CONFIG.json",
                   help="module shapes to check against (default compact)")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                   help="dtype of the weights (default bf16)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backends.compile.pipeline import check_rules
    from deltachip.commands.sim import load_circuit
    circuit = load_circuit(args.file, args.top)
    if not circuit.kinds:
        raise UserError(f"{args.file}: '{circuit.name}' is a module, not a circuit: "
                        "only circuits compile (token kinds and `next`)")
    rep = check_rules(circuit, args.target, args.dtype)
    print(f"{args.file}: circuit {circuit.name} follows every compile rule "
          f"({args.target}, {args.dtype}: {rep.layers} layers, hidden {rep.hidden}, "
          f"vocabulary {rep.vocab:,}, {rep.memories} memor{'y' if rep.memories == 1 else 'ies'})")
    return 0
