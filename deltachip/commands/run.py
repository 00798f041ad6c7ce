"""``deltachip run``: run a firmware ELF on one of the CPU engines.

The program's UART output goes to stdout and nothing else does; diagnostics go to stderr.
The exit status is the program's exit code (a0 of the exit ``ecall``, modulo 256), 3 on a
machine fault, 124 when ``--max-steps`` runs out, 2 on bad input (unloadable ELF, --input
without an input buffer, …). See docs/cpu.md.

Engines are a registry (:data:`ENGINES`): a name, the ``module:callable`` that loads a
program (``factory(path, input_text) -> machine`` whose ``run(max_steps, trace)`` returns a
:class:`cpu.emulator.RunResult`) and a one-line description. The module is imported only
when the engine is chosen, so an engine whose dependencies are missing does not break the
others. ``sim``, ``hf`` and ``fast`` run the core of cpu/rv32 (docs/cpu.md); later engines
add an entry here.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from common.errors import UserError
from common.kinds import DType
from cpu import memmap
from common.outputs import replace_on_success
from common.progress import progress_line

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
    compiled: bool = False      # takes target= and dtype= (a compiled model)
    batch: str | None = None    # "module:attribute" of a loader of many streams at once


    def load(self, which: str | None = None) -> Callable[..., Any]:
        module, _, attr = (which or self.target).partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


ENGINES: dict[str, Engine] = {}


def register_engine(name: str, target: str, description: str, compiled: bool = False,
                    batch: str | None = None) -> None:
    """Add an engine to ``deltachip run --engine``; a ``compiled`` engine's loader also takes
    ``target=`` and ``dtype=`` keywords. ``batch``: the loader of many streams for
    ``--inputs`` (``batch(path, inputs, count, threads=, **options) -> runner``, ``inputs()``
    an iterator of the lines, whose ``results(max_steps)`` gives a RunResult per input, in
    order, each once it and those before it are done, in groups of streams of bounded
    memory); without one, inputs run one by one."""
    ENGINES[name] = Engine(name, target, description, compiled, batch)


register_engine("ref", "cpu.emulator:Machine.from_elf", "golden RV32IM+Zba ISA emulator (Python)")
register_engine("sim", "cpu.rv32.engines:sim_engine",
                "the core's HDL (cpu/rv32) in the reference simulator")
register_engine("hf", "cpu.rv32.engines:hf_engine",
                "the compiled core in transformers' Qwen3.5 modules", compiled=True,
                batch="cpu.rv32.engines:hf_batch")
register_engine("fast", "cpu.rv32.engines:fast_engine",
                "the same compiled core on the fast sparse engine, bit-identical to hf",
                compiled=True, batch="cpu.rv32.engines:fast_batch")

EPILOG = """examples:
  deltachip run hello.elf
  deltachip run calc.elf --input '2**100'
  echo '-7 // 2' | deltachip run calc.elf            # the input from standard input
  deltachip run calc.elf --input=-7//2                # a text starting with '-'
  deltachip run prog.elf --max-steps 1000000 --stats stats.json --trace prog.trace
  deltachip run calc.elf --engine fast --inputs exprs.txt   # one input a line, one output line each

exit status: the program's exit code (mod 256); 3 machine fault; 124 step budget exhausted;
2 bad input; with --inputs, 0 when every input's run exited 0, else the first failing
input's status. Trace format and fault causes: docs/cpu.md. At a terminal a progress line
(instructions, tokens, tokens/s) shows on stderr while the program runs.
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
                   help="text written NUL-terminated into the program's input buffer (without "
                        "--input: standard input when it is a pipe or a file); a text that "
                        "starts with '-' is written --input=TEXT")
    p.add_argument("--inputs", type=Path, metavar="FILE",
                   help="run the program once per line of FILE (the line is its input): hf and "
                        "fast advance the runs in batches of up to 32 streams; prints one "
                        "line per input, in order, each once it and those before it are done "
                        "(its output, a final newline dropped, other newlines and "
                        "backslashes escaped as \\n and \\\\)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="--inputs on fast: threads to run the streams on (default: the CPUs)")
    p.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS, metavar="N",
                   help=f"stop after N instructions (default {DEFAULT_MAX_STEPS:,}); exit 124")
    p.add_argument("--target", default=None, metavar="T",
                   help="compiled engines: compact (default), qwen3.5-4b or a Qwen3.5 config.json")
    p.add_argument("--dtype", choices=[d.value for d in DType], default=None,
                   help="compiled engines: weight dtype (default bf16)")
    p.add_argument("--model", type=Path, default=None, metavar="MERGED_DIR",
                   help="run the core inside a checkpoint written by `deltachip merge "
                        "--firmware` (routed layout): hf through the whole merged model, fast "
                        "on its chip part")
    p.add_argument("--stats", type=Path, metavar="OUT.json",
                   help="write run statistics (engine, instructions, seconds, exit_code, …)")
    p.add_argument("--trace", type=Path, metavar="OUT",
                   help="write one line per retired instruction (format: docs/cpu.md)")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    if args.max_steps < 0:
        raise UserError(f"--max-steps must be >= 0, got {args.max_steps}")
    engine = ENGINES[args.engine]
    if args.threads is not None and (args.threads < 1 or args.inputs is None):
        raise UserError("--threads applies to --inputs and must be >= 1")
    from common.clobber import refuse_inputs_as_outputs
    refuse_inputs_as_outputs([("--stats", args.stats), ("--trace", args.trace)],
                             [("the program", args.program), ("the --inputs file", args.inputs),
                              ("the merged model", args.model)])
    options = _compiled_options(args, engine)
    if args.inputs is not None:
        if args.input is not None or args.trace is not None:
            raise UserError("--inputs runs many inputs: it does not combine with --input or "
                            "--trace")
        return run_inputs(args, engine, options)
    input_text = None
    if args.input is not None:
        input_text = args.input.encode("utf-8", "surrogateescape")
    else:
        input_text = read_stdin(args.program)
    machine = engine.load()(args.program, input_text, **options)
    with contextlib.ExitStack() as outputs:
        # --stats is checked now and written all at once at the end (never half-written);
        # the trace is a log, streamed as the program runs
        stats_tmp = (outputs.enter_context(replace_on_success(args.stats, "--stats: "))
                     if args.stats is not None else None)
        trace_file = None
        if args.trace is not None:
            trace_tmp = outputs.enter_context(replace_on_success(args.trace, "--trace: "))
            trace_file = outputs.enter_context(open(trace_tmp, "w", encoding="ascii"))
        status, stats = _run(machine, args.max_steps, trace_file)
        if stats_tmp is not None:
            stats = {"engine": engine.name, "program": str(args.program), **stats}
            if hasattr(machine, "stats"):      # token engines: tokens, layers, weights, ...
                stats.update(machine.stats())
            stats_tmp.write_text(json.dumps(stats, indent=2) + "\n")
    return status


def _compiled_options(args: argparse.Namespace, engine: Engine) -> dict[str, Any]:
    """--target, --dtype and --model, refused for an engine that runs no compiled model
    (--model: hf and fast)."""
    options = {}
    for opt in ("target", "dtype"):
        if getattr(args, opt) is not None:
            if not engine.compiled:
                raise UserError(f"--{opt} applies to the compiled engines (hf, fast), not "
                                f"--engine {engine.name}")
            options[opt] = getattr(args, opt)
    if args.model is not None:
        if not engine.compiled:
            raise UserError(f"--model runs the core inside a merged checkpoint on --engine hf "
                            f"or fast, not --engine {engine.name}")
        if args.target is not None:
            raise UserError("--model and --target do not combine: a merged checkpoint's core "
                            "was compiled for its base")
        options["model"] = args.model
    return options


#: the most bytes ``--inputs`` reads (its lines each fit the program's input buffer)
MAX_INPUTS_BYTES = 64 << 20


def read_inputs(path: Path, program: Path) -> bytes:
    """The bytes of ``--inputs`` FILE, read with a bound (:func:`input_lines` splits them
    into lines); the program must have an input buffer. A line too long for the buffer is
    refused later, naming FILE:LINE."""
    from common.inputs import InputTooLarge, read_bounded
    from cpu.elf import read_elf
    if memmap.INPUT_BUFFER_SYMBOL not in read_elf(program).symbols:
        raise UserError(f"{program}: --inputs: the program has no input buffer "
                        f"({memmap.INPUT_BUFFER_SYMBOL})")
    try:
        data = read_bounded(path, MAX_INPUTS_BYTES, "--inputs")
    except InputTooLarge as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"{path}: cannot read the --inputs file: {e.strerror or e}") from None
    if not data:
        raise UserError(f"{path}: the --inputs file is empty (one input a line)")
    return data


def input_lines(data: bytes) -> Iterator[bytes]:
    """The lines of ``data`` without their newlines, one at a time (a final newline ends the
    last line, it does not start an empty one): never a list of them all."""
    body = data.removesuffix(b"\n")
    start = 0
    while True:
        end = body.find(b"\n", start)
        if end < 0:
            yield body[start:]
            return
        yield body[start:end]
        start = end + 1


def _one_line(output: bytes) -> bytes:
    """A run's output as one line: its final newline dropped, the rest escaped."""
    return output.removesuffix(b"\n").replace(b"\\", b"\\\\").replace(b"\n", b"\\n")


def run_inputs(args: argparse.Namespace, engine: Engine, options: dict[str, Any]) -> int:
    """``--inputs FILE``: the program once per line, one output line each (docs/cpu.md)."""
    from cpu.emulator import ElfError
    data = read_inputs(args.inputs, args.program)
    count = data.removesuffix(b"\n").count(b"\n") + 1
    counts = {"instructions": 0, "streams": count, "done": 0}
    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []
    status = 0
    stdout = sys.stdout.buffer
    with contextlib.ExitStack() as outputs:
        stats_tmp = (outputs.enter_context(replace_on_success(args.stats, "--stats: "))
                     if args.stats is not None else None)
        if engine.batch is not None:
            try:
                runner = engine.load(engine.batch)(args.program, lambda: input_lines(data),
                                                   count, threads=args.threads, **options)
            except ElfError as e:
                raise UserError(f"{args.inputs}:{e}") from None
            results, watch = runner.results(args.max_steps), runner.counters
        else:
            results, watch = _one_by_one(args, engine, options, data, counts), lambda: counts
        with progress_line(watch):
            # each line printed once it and every line before it are done, so an interrupt
            # loses no finished line; a group of streams at a time (the batch engines)
            for k, res in enumerate(results, 1):
                stdout.write(_one_line(res.output) + b"\n")
                stdout.flush()
                code = _status_of(res, res.instructions, f"{args.inputs}:{k}: ")
                status = status or code
                if stats_tmp is not None:
                    runs.append({"exit_code": res.exit_code, "instructions": res.instructions,
                                 "fault": str(res.fault) if res.fault else None,
                                 "timed_out": res.timed_out})
        extra = runner.stats() if engine.batch is not None else {}
        seconds = time.perf_counter() - t0
        if stats_tmp is not None:
            n = sum(r["instructions"] for r in runs)
            stats = {"engine": engine.name, "program": str(args.program), "inputs": count,
                     "instructions": n, "seconds": round(seconds, 6),
                     "instructions_per_second": round(n / seconds, 3) if seconds > 0 else None,
                     "exit_status": status, **extra, "runs": runs}
            stats_tmp.write_text(json.dumps(stats, indent=2) + "\n")
    return status


def _one_by_one(args: argparse.Namespace, engine: Engine, options: dict[str, Any],
                data: bytes, counts: dict[str, int]) -> Iterator[Any]:
    """``--inputs`` on an engine without a batch loader: one machine at a time, every line
    checked against the input buffer first (a line that does not fit is refused before
    any runs)."""
    from cpu.elf import read_elf
    from cpu.emulator import ElfError, check_input
    elf = read_elf(args.program)
    for k, text in enumerate(input_lines(data), 1):
        try:
            check_input(elf, text)
        except ElfError as e:
            raise UserError(f"{args.inputs}:{k}: {e}") from None
    for k, text in enumerate(input_lines(data), 1):
        try:
            machine = engine.load()(args.program, text, **options)
        except ElfError as e:
            raise UserError(f"{args.inputs}:{k}: {e}") from None
        res = machine.run(args.max_steps)
        counts["instructions"] += res.instructions
        counts["done"] += 1
        yield res


def _status_of(result: Any, instructions: int, where: str = "", pc: int | None = None) -> int:
    """The exit status of a finished run of ``instructions`` in all, its fault or exhausted
    budget said on stderr (``where``: which run; ``pc``: where the budget stopped it)."""
    if result.fault is not None:
        print(f"deltachip run: {where}{result.fault} (after {instructions:,} instructions)",
              file=sys.stderr)
        return EXIT_FAULT
    if result.exit_code is None:
        at = f" (pc 0x{pc:08x})" if pc is not None else ""
        print(f"deltachip run: {where}step budget exhausted: {instructions:,} instructions "
              f"without exit{at}; raise --max-steps", file=sys.stderr)
        return EXIT_TIMEOUT
    return result.exit_code & 0xFF


def read_stdin(program: Path) -> bytes | None:
    """The input text from standard input when it is a pipe or a file, not a terminal
    (``echo 2**100 | deltachip run calc.elf``): its bytes, or None when it is a terminal,
    closed or empty, or when ``program`` has no input buffer (a program that reads no input
    ignores standard input, as a Unix program would, and none of it is read). At most the
    input buffer's capacity is read (the RAM's size when the ELF does not say it): a longer
    input is refused, never read in full."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
        return None
    from common.inputs import InputTooLarge, read_bounded
    from cpu.elf import read_elf
    from cpu.emulator import input_capacity
    image = read_elf(program)
    if memmap.INPUT_BUFFER_SYMBOL not in image.symbols:
        return None
    capacity = input_capacity(image)
    holds = (f"the program's input buffer holds {capacity} bytes including the terminating NUL"
             if capacity is not None else f"the input buffer is in the {memmap.RAM_SIZE}-byte RAM")
    limit = max(0, (capacity if capacity is not None else memmap.RAM_SIZE) - 1)
    try:
        data = read_bounded(sys.stdin.buffer, limit, "the input")
    except InputTooLarge:
        raise UserError(f"standard input is more than {limit} bytes; {holds}") from None
    except OSError as e:
        raise UserError(f"cannot read the input from standard input: {e.strerror or e}") from None
    return data or None


def _run(machine: Any, max_steps: int, trace_file: IO[str] | None) -> tuple[int, dict[str, Any]]:
    """Run ``machine`` for up to ``max_steps`` instructions, UART output to stdout and retire
    records to ``trace_file``; report a fault or an exhausted budget on stderr.
    Returns the exit status and the run's statistics."""
    stdout = sys.stdout.buffer
    instructions = 0
    t0 = time.perf_counter()
    counters = getattr(machine, "counters", None)       # token engines count as they go
    with progress_line(counters or (lambda: {"instructions": instructions})):
        while True:
            steps = min(CHUNK_STEPS if trace_file or not counters else 1 << 22,
                        max_steps - instructions)
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
    status = _status_of(result, instructions,
                        pc=machine.pc if result.fault is None and result.exit_code is None else None)
    stats = {
        "instructions": instructions,
        "seconds": round(seconds, 6),
        "instructions_per_second": (round(instructions / seconds, 3) if seconds > 0 else None),
        "exit_code": result.exit_code, "exit_status": status,
        "fault": str(result.fault) if result.fault else None,
        "timed_out": result.exit_code is None and result.fault is None,
    }
    return status, stats
