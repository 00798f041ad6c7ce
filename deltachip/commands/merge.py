"""``deltachip merge``: a compiled chip merged into a stock Qwen3.5 text checkpoint.

Takes: BASE_DIR (a local Qwen3.5 text checkpoint: config.json, safetensors single or sharded
with an index, tokenizer), OUT_DIR, ``--chip DIR`` (written by ``deltachip compile``),
``--dtype`` (default: the chip's; it must be the chip's) and ``--layout`` (``routed`` or
``stock``). Gives: OUT_DIR as :mod:`backends.merge.routed` or :mod:`backends.merge.stock`
describes it, written atomically, and a summary on stdout. Exit 0; a bad base, chip or
output path, a full disk: a UserError (status 2), nothing written and BASE_DIR untouched.
docs/merge.md.
"""
from __future__ import annotations

import argparse

from common.kinds import DType

DESCRIPTION = """Merge a compiled chip into a Qwen3.5 text checkpoint. The routed layout keeps
every base tensor byte for byte, runs the chip's layers on their own residual beside the
base's, and ships a modeling file (load with trust_remote_code=True): text gives the base's
logits bit for bit, chip tokens (appended to the vocabulary as special tokens) give what the
chip gives alone. The stock layout is one widened Qwen3_5ForCausalLM that transformers loads
without remote code (chip layers in front, the base's tensors in their block): the chip is
still exact, text is close to but not equal to the base's (docs/merge.md measures it); compile
the chip for it with `deltachip compile FILE.hdl --target BASE_DIR/config.json`."""

EPILOG = """examples:
  deltachip compile examples/counter/counter.hdl -o build/counter
  deltachip merge ~/models/qwen3.5-text build/merged --chip build/counter

  then, in Python:
    model = AutoModelForCausalLM.from_pretrained("build/merged", trust_remote_code=True)

  deltachip compile examples/counter/counter.hdl --target ~/models/qwen3.5-text/config.json \
      -o build/counter-q
  deltachip merge ~/models/qwen3.5-text build/stock --chip build/counter-q --layout stock

Details, what the layout promises and what it does not support: docs/merge.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("merge", help="merge a compiled chip into a Qwen3.5 checkpoint",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", metavar="BASE_DIR", help="a local Qwen3.5 text checkpoint directory "
                   "(read only, never written)")
    p.add_argument("output", metavar="OUT_DIR", help="where the merged checkpoint goes (new, "
                   "empty, or a previous merge output)")
    p.add_argument("--chip", required=True, metavar="CHIP_DIR",
                   help="a directory written by `deltachip compile`")
    p.add_argument("--dtype", choices=[d.value for d in DType], default=None,
                   help="the dtype the merged model runs in (default and only choice: the "
                        "chip's own)")
    p.add_argument("--layout", choices=["routed", "stock"], default="routed",
                   help="routed (default): base and chip side by side, text bit-identical; "
                        "stock: one widened Qwen3_5ForCausalLM, no remote code, text close "
                        "to the base's")
    p.set_defaults(func=merge_command)


def merge_command(args: argparse.Namespace) -> int:
    import sys
    from backends.merge.routed import merge_routed
    from backends.merge.stock import merge_stock
    fn = merge_stock if args.layout == "stock" else merge_routed
    r = fn(args.base, args.output, args.chip, args.dtype,
           progress=lambda s: print(f"merge: {s}", file=sys.stderr))
    width = f", hidden {r.hidden:,}" if args.layout == "stock" else ""
    print(f"{r.out}: {args.layout} merge, {len(r.shards)} shards{width}, {r.out_bytes:,} bytes "
          f"(base {r.base_bytes:,}, chip {r.chip_bytes:,}; {r.out_bytes / r.base_bytes:.3f}x "
          f"the base), chip tokens {r.token_offset}..{r.token_offset + r.chip_tokens - 1}, "
          f"{r.seconds:.1f} s")
    return 0
