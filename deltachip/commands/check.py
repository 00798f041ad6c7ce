"""``deltachip check``: run a compiled chip in transformers (or on the fast engine) and
compare it with the simulator, or the fast engine with transformers.

Takes: a directory written by ``deltachip compile`` or ``deltachip merge`` (either layout:
its chip is checked; every engine opened by :func:`backends.engines.registry.open_engine`), a step count, a dtype, a batch size,
``--prefill``, an optional start token, ``--no-lanes``. Gives: every mismatch (position,
signal, both values) and each row's first diverging residual lane (position, layer,
sublayer, lane, the HDL signal it carries with its file:line:col) on stdout and a summary
line; exit 0 only when there are none (1 otherwise; bad input 2,
including a directory that is missing, corrupt, truncated, from an older format or whose
config.json does not match its chip.json: see :mod:`backends.chipdir.checkpoint`).
"""
from __future__ import annotations

import argparse

from common.errors import UserError
from common.kinds import DType

DESCRIPTION = """Run a compiled chip in transformers' own Qwen3_5ForCausalLM and compare every
position with the reference simulator: the next token, every memory's contents (read back
from the GDN recurrent state) and, after every sublayer, every live residual lane against the
value the compiler designed it to hold. --engine fast runs the same checkpoint on the fast
sparse engine instead; --against hf compares that engine with transformers, bit for bit."""

EPILOG = """examples:
  deltachip check build/counter --steps 64
  deltachip check build/gcd --steps 200 --dtype fp32 --batch 4
  deltachip check build/gcd --steps 200 --prefill --start 'Step a=48 b=18'
  deltachip check build/stack --steps 40 --mem-every 10
  deltachip check build/gcd --steps 200 --engine fast
  deltachip check build/gcd --steps 200 --engine fast --against hf

(build/counter, build/gcd and build/stack as made by the examples of `deltachip compile`.
DIR may also be a model `deltachip merge` wrote, routed or stock: its chip is checked
through the whole merged model, on either engine.)

Decode (default) is greedy: each next token is the model's argmax, fed back. --prefill feeds
the simulator's token stream in calls of at most 2048 positions (the cache carries over) and
compares every position's argmax. Memories are compared after every position in decode
(--mem-every N: every N positions and at the end), after every call in prefill. Lanes: after
each layer's GDN and MLP sublayer, every live lane must equal its designed value (the
compiled program's neurons evaluated on the simulator's traced memory reads); the first
diverging lane of each row is printed as `LANE position P: layer L GDN|MLP: lane ...
carrying bit B of signal `s` (op at file:line:col): designed D, model M`. --no-lanes compares tokens and memories only.

--against hf (with --engine fast) feeds both engines the same tokens (the fast engine's
argmax) in decode and compares, at every position, the next token, every residual dim after
every sublayer (not only the live lanes) and, every --mem-every positions, every memory.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check", help="compare compiled weights with the simulator",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="a directory written by `deltachip compile`")
    p.add_argument("--steps", type=int, default=64, metavar="N", help="steps to run (default 64)")
    p.add_argument("--dtype", choices=[d.value for d in DType], help="run dtype (default: the saved one)")
    p.add_argument("--batch", type=int, default=1, metavar="B", help="parallel streams in one batch (default 1); each runs from the same start "
                        "token, so every row must give the same answer")
    p.add_argument("--prefill", action="store_true", help="feed the whole stream in one call")
    p.add_argument("--start", metavar="'Kind f=1'", help="the first token (default: the circuit's)")
    p.add_argument("--mem-every", type=int, default=1, metavar="N",
                   help="compare memories every N positions (default 1)")
    p.add_argument("--no-lanes", dest="lanes", action="store_false",
                   help="compare tokens and memories only, not the residual lanes")
    p.add_argument("--engine", choices=["hf", "fast"], default="hf",
                   help="the engine that runs the checkpoint (default hf: transformers)")
    p.add_argument("--against", choices=["sim", "hf"], default="sim",
                   help="what it is compared with (default sim: the reference simulator; hf: "
                        "transformers, bit for bit, with --engine fast)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging
    from backends.verify.check import check_engine, compare_engines, load_engine
    from hdl.sim import parse_token
    if args.steps < 0 or args.batch < 1 or args.mem_every < 1:
        raise UserError("--steps must be >= 0, --batch and --mem-every >= 1")
    if args.against == args.engine:
        raise UserError(f"--against {args.against} compares an engine with itself: use "
                        f"--engine fast --against hf")
    if args.against == "hf" and args.prefill:
        raise UserError("--against hf compares in decode; --prefill is for --against sim")
    hf_logging.disable_progress_bar()
    eng = load_engine(args.engine, args.dir, args.dtype)
    starts = None
    if args.start is not None:
        starts = [parse_token(eng.circuit, args.start)] * args.batch
    if args.against == "hf":
        rep = compare_engines(eng, load_engine("hf", args.dir, args.dtype), args.steps,
                              args.batch, starts, args.mem_every, lanes=args.lanes)
    else:
        rep = check_engine(eng, args.steps, args.batch, args.prefill, starts, args.mem_every,
                           lanes=args.lanes)
    for note in rep.notes:
        print(f"note: {note}")
    for line in rep.problems():
        print(line)
    mode = "prefill" if args.prefill else "decode"
    shown = len(rep.mismatches) + len(rep.signals) + len(rep.lanes)
    status = "OK" if rep.ok else f"FAILED ({shown} mismatches shown)"
    mems = (f"{rep.memory_checks} memory comparison{'s' * (rep.memory_checks != 1)}, "
            if eng.circuit.memories else "")
    what = "" if (args.engine, args.against) == ("hf", "sim") else f"{args.engine} against {args.against}, "
    print(f"{status}: {rep.positions} positions ({what}{mode}, {eng.dtype_name}, batch {args.batch}), "
          f"{mems}{rep.lane_checks} lane values compared")
    return 0 if rep.ok else 1
