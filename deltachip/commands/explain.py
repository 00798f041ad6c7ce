"""``deltachip explain``: what a compiled chip's weights are for, traced to the source.

Takes: a directory written by ``deltachip compile`` and one question: ``--layer L`` (every
MLP neuron, written lane and GDN key head of layer L, each with the ``file:line:col``, IR op
and signal it came from) or ``--source FILE.hdl:LINE`` (the neurons, lanes and key heads
that line became, per layer, with totals: where did this line go, at what cost). Gives: the
answer on stdout, exit 0; a missing or outdated directory, a layer out of range or a file
the chip does not come from is a UserError (exit 2). Reads chip.json only (its ``trace``
section, :mod:`backends.compile.trace`).
"""
from __future__ import annotations

import argparse

DESCRIPTION = """Explain a compiled chip: which source line and signal every MLP neuron, residual
lane and GDN key head of a layer comes from (--layer), or what one source line became (--source)."""

EPILOG = """examples:
  deltachip explain build/counter --layer 0
  deltachip explain build/counter --source examples/counter/counter.hdl:14
  deltachip explain build/stack --source stack_machine.hdl:48

--source takes the path the chip was compiled from, or any unique end of it. MLP row i of a
layer is row i of its gate_proj and up_proj and column i of its down_proj; dims are residual
dimensions (the ballast dims come first).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("explain", help="trace a compiled chip's weights to source lines",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="a directory written by `deltachip compile`")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--layer", type=int, metavar="L", help="explain every neuron and head of layer L")
    what.add_argument("--source", metavar="FILE.hdl:LINE", help="what this source line became")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backends.chipdir.checkpoint import load_chip_json
    from backends.compile.trace import ChipTrace, parse_source
    where = f"{args.dir}/chip.json"
    if args.source is not None:
        file, line = parse_source(args.source)
        print(ChipTrace(load_chip_json(args.dir), where).source(file, line))
    else:
        print(ChipTrace(load_chip_json(args.dir), where).layer(args.layer))
    return 0
