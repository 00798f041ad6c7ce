"""``deltachip run``: run a firmware ELF on one of the CPU engines.

The program's UART output goes to stdout and nothing else does; diagnostics go to stderr.
The exit status is the program's exit code (a0 of the exit ``ecall``, modulo 256), 3 on a
machine fault, 124 when ``--max-steps`` runs out, 2 on bad input (unloadable ELF, --input
without an input buffer, …). See docs/cpu.md.

Engines are a registry (:data:`ENGINES`): a name, the ``module:callable`` that loads a
program (``factory(path, input_text) -> machine`` whose ``run(max_steps, trace)`` returns a
:class:`cpu.emulator.RunResult`) and a one-line description. The module is imported only
when the engine is chosen, so an engine whose dependencies are missing does not break the
others. Later engines (``sim``, ``hf``, ``fast``) add an entry here.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from deltachip.errors import UserError
from deltachip.outputs import replace_on_success

EXIT_FAULT = 3
EXIT_TIMEOUT = 124
DEFAULT_MAX_STEPS = 50_000_000
CHUNK_STEPS = 1 << 16


@dataclass(frozen=True)
class Engine:
    """A registered engine: ``target`` is ``"module:attribute"`` of its program loader."""
    name: str
    target: str
    description: str

    def load(self) -> Callable[[Path, bytes | None], Any]:
        module, _, attr = self.target.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


ENGINES: dict[str, Engine] = {}


def register_engine(name: str, target: str, description: str) -> None:
    """Add an engine to ``deltachip run --engine``."""
    ENGINES[name] = Engine(name, target, description)


register_engine("ref", "cpu.emulator:Machine.from_elf", "golden RV32IM+Zba ISA emulator (Python)")

EPILOG = """examples:
  deltachip run hello.elf
  deltachip run calc.elf --input '2**100'
  deltachip run prog.elf --max-steps 1000000 --stats stats.json --trace prog.trace

exit status: the program's exit code (mod 256); 3 machine fault; 124 step budget exhausted;
2 bad input. Trace format and fault causes: docs/cpu.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    engines = ", ".join(f"{e.name} ({e.description})" for e in ENGINES.values())
    p = subparsers.add_parser(
        "run", help="run a firmware ELF on a CPU engine",
        description="Run an RV32IM+Zba firmware ELF: UART output to stdout, exit status = the "
                    "program's exit code.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("program", type=Path, metavar="PROG.elf", help="the firmware ELF")
    p.add_argument("--engine", choices=sorted(ENGINES), default="ref",
                   help=f"engine to run on (default ref): {engines}")
    p.add_argument("--input", metavar="TEXT",
                   help="text written NUL-terminated into the program's input buffer")
    p.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS, metavar="N",
                   help=f"stop after N instructions (default {DEFAULT_MAX_STEPS:,}); exit 124")
    p.add_argument("--stats", type=Path, metavar="OUT.json",
                   help="write run statistics (engine, instructions, seconds, exit_code, …)")
    p.add_argument("--trace", type=Path, metavar="OUT",
                   help="write one line per retired instruction (format: docs/cpu.md)")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    if args.max_steps < 0:
        raise UserError(f"--max-steps must be >= 0, got {args.max_steps}")
    engine = ENGINES[args.engine]
    input_text = None
    if args.input is not None:
        input_text = args.input.encode("utf-8", "surrogateescape")
    machine = engine.load()(args.program, input_text)
    with contextlib.ExitStack() as outputs:
        # --stats is checked now and written all at once at the end (never half-written);
        # the trace is a log, streamed as the program runs
        stats_tmp = (outputs.enter_context(replace_on_success(args.stats, "--stats: "))
                     if args.stats is not None else None)
        trace_file = None
        if args.trace is not None:
            try:
                trace_file = outputs.enter_context(open(args.trace, "w", encoding="ascii"))
            except OSError as e:
                raise UserError(f"--trace: cannot write {args.trace}: {e.strerror or e}") from None
        status, stats = _run(machine, args.max_steps, trace_file)
        if stats_tmp is not None:
            stats = {"engine": engine.name, "program": str(args.program), **stats}
            stats_tmp.write_text(json.dumps(stats, indent=2) + "\n")
    return status


def _run(machine: Any, max_steps: int, trace_file: IO[str] | None) -> tuple[int, dict[str, Any]]:
    """Run ``machine`` for up to ``max_steps`` instructions, UART output to stdout and retire
    records to ``trace_file``; report a fault or an exhausted budget on stderr.
    Returns the exit status and the run's statistics."""
    stdout = sys.stdout.buffer
    instructions = 0
    t0 = time.perf_counter()
    while True:
        steps = min(CHUNK_STEPS if trace_file else 1 << 22, max_steps - instructions)
        result = machine.run(steps, trace=trace_file is not None)
        instructions += result.instructions
        if result.output:
            stdout.write(result.output)
            stdout.flush()
        if trace_file is not None:
            trace_file.writelines(r.format() + "\n" for r in result.retired)
        if not result.timed_out or instructions >= max_steps:
            break
    seconds = time.perf_counter() - t0
    if result.fault is not None:
        status = EXIT_FAULT
        print(f"deltachip run: {result.fault} (after {instructions:,} instructions)",
              file=sys.stderr)
    elif result.exit_code is None:
        status = EXIT_TIMEOUT
        print(f"deltachip run: step budget exhausted: {instructions:,} instructions without "
              f"exit (pc 0x{machine.pc:08x}); raise --max-steps", file=sys.stderr)
    else:
        status = result.exit_code & 0xFF
    stats = {
        "instructions": instructions,
        "seconds": round(seconds, 6),
        "instructions_per_second": round(instructions / seconds) if seconds > 0 else None,
        "exit_code": result.exit_code, "exit_status": status,
        "fault": str(result.fault) if result.fault else None,
        "timed_out": result.exit_code is None and result.fault is None,
    }
    return status, stats
