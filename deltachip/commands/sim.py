"""``deltachip sim``: run a circuit in the reference simulator and print its token stream.

Takes: a ``.hdl`` file (its top circuit, or ``--top NAME``), optional ROM images, a start
token, a step budget. Gives: one line per token on stdout (``Kind field=value ...``, signed
fields signed), from the start token until a halt token or the budget; optionally a VCD
waveform. Exit status 0; bad input is a UserError (status 2). A circuit that breaks the
depth rule or the vocabulary limit simulates, with a warning on stderr that
``deltachip compile`` will refuse it.
"""
from __future__ import annotations

import argparse
import sys

from common.errors import UserError
from common.outputs import replace_on_success

DESCRIPTION = """Run a circuit in the reference simulator: print the token stream, one token per
line, from the start token until a halt token or --steps steps."""

EPILOG = """examples:
  deltachip sim examples/counter/counter.hdl
  deltachip sim examples/gcd/gcd.hdl --start 'Step a=48 b=18' --steps 100
  deltachip sim cpu.hdl --rom code=prog.hex --vcd run.vcd --steps 5000

--rom NAME=FILE replaces memory NAME's image (.hex: hexadecimal words, one or more per line,
// comments; other suffixes: raw little-endian words); a RAM's initial contents can be given
the same way. Exit status 0, or 2 on bad input (the message says what and where).
--vcd writes every named signal, the token and the memory writes (1 ns = 1 step); the file
appears when the run ends (a failed run leaves an existing file as it was).
"""

CHUNK = 4096


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sim", help="run a circuit in the reference simulator",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE.hdl", help="the source file")
    p.add_argument("--top", metavar="NAME", help="the circuit to run (default: the file's top)")
    p.add_argument("--steps", type=int, default=1000, metavar="N",
                   help="stop after N steps without a halt token (default 1000)")
    p.add_argument("--rom", action="append", default=[], metavar="NAME=FILE",
                   help="load memory NAME from FILE (.hex or .bin); repeatable")
    p.add_argument("--start", metavar="'Kind f=1 g=2'",
                   help="the first token (default: the circuit's `start`)")
    p.add_argument("--vcd", metavar="OUT.vcd", help="write a waveform of the run")
    p.add_argument("--engine", choices=["auto", "c", "python"], default="auto",
                   help="simulator backend (default auto: C when a compiler works)")
    p.set_defaults(func=run)


def load_circuit(path: str, top: str | None):
    """The elaborated top circuit of ``path`` (the front end's errors are UserErrors)."""
    from hdl.frontend import load_circuit as frontend_load
    return frontend_load(path, top=top)


def run(args: argparse.Namespace) -> int:
    from hdl.sim import Simulator, format_token, load_rom_specs, parse_token
    if args.steps < 0:
        raise UserError(f"--steps must be >= 0, got {args.steps}")
    from common.clobber import refuse_inputs_as_outputs
    refuse_inputs_as_outputs([("--vcd", args.vcd)], [("the source file", args.file)] + [
        ("a --rom image", spec.partition("=")[2]) for spec in args.rom if "=" in spec])
    circuit = load_circuit(args.file, args.top)
    if not circuit.kinds:
        raise UserError(f"{args.file}: '{circuit.name}' is a module, not a circuit: "
                        "`deltachip sim` runs circuits (token kinds and `next`)")
    roms = load_rom_specs(args.rom, circuit.memories, circuit.name)
    _warn_compile_rules(circuit, args.file)
    if args.start is not None:
        start = parse_token(circuit, args.start)
    elif circuit.start is not None:
        start = circuit.start
    else:
        raise UserError(f"circuit '{circuit.name}' declares no start token: give one with "
                        "--start 'Kind field=value ...'")
    sim = Simulator(circuit, roms=roms, backend=args.engine)
    if args.vcd:
        _run_with_vcd(sim, start, args.steps, args.vcd)
        return 0
    out = sys.stdout
    out.write(format_token(circuit, start) + "\n")
    tok, left = start, args.steps
    while left > 0 and not circuit.kinds[tok.kind].halt:
        new = sim.run(tok, min(left, CHUNK))[1:]
        out.write("".join(format_token(circuit, t) + "\n" for t in new))
        left -= len(new)
        tok = new[-1]
    out.flush()
    return 0


def _warn_compile_rules(circuit, path: str) -> None:
    """On stderr, the cheap compile rules the circuit breaks (the depth rule, the vocabulary
    limit: :mod:`backends.compile.rules`), so a design that simulates is not taken to compile;
    ``deltachip check-rules`` checks them all."""
    from backends.compile.rules import check_vocabulary
    from backends.compile.schedule import check_depth_rule
    from hdl.diagnostics import CompileError
    for check in (check_vocabulary, check_depth_rule):
        try:
            check(circuit)
        except CompileError as e:
            print(f"deltachip sim: warning: this circuit simulates, but `deltachip compile` "
                  f"refuses it (`deltachip check-rules {path}` checks every rule):\n{e}",
                  file=sys.stderr)
            return


def _run_with_vcd(sim, start, steps: int, path: str) -> None:
    """Step by step, printing each token and adding it (and its step's trace) to the VCD."""
    from hdl.sim import format_token
    from hdl.sim.waveform import Waveform
    circuit = sim.circuit
    # written to a temporary file and renamed at the end: a failed or interrupted run leaves
    # whatever was at ``path`` untouched, never half a waveform
    with replace_on_success(path, "--vcd: ") as tmp, Waveform(tmp, circuit) as wave:
        tok, out = start, sys.stdout
        for t in range(steps + 1):
            out.write(format_token(circuit, tok) + "\n")
            if t == steps or circuit.kinds[tok.kind].halt:
                wave.add(t, tok)
                break
            r = sim.step(tok, trace=True)
            wave.add(t, tok, r)
            tok = r.next
    out.flush()
