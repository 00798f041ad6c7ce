"""``deltachip merge``: a compiled chip merged into a stock Qwen3.5 text checkpoint.

Takes: BASE_DIR (a local Qwen3.5 checkpoint, text or vision-language (taken as its text
model): config.json, safetensors single or sharded with an index, tokenizer), OUT_DIR,
``--chip DIR`` (written by ``deltachip compile``) or ``--firmware calc|python|PROG.elf`` (the
RISC-V core for the base's shapes from the core cache, ``--target`` to choose another, with
the program's memory images; given more than once, one core with each program's images, a
tool call run on the program whose tool it names),
``--dtype`` (default: the chip's; it must be the chip's),
``--tables`` (how the chip's token tables are stored; routed) and ``--layout`` (``routed``
or ``stock``). Gives: OUT_DIR as :mod:`backends.merge.routed` or :mod:`backends.merge.stock`
describes it, written atomically, and a summary on stdout. Exit 0; a bad base, chip or
output path, a full disk: a UserError (status 2), nothing written and BASE_DIR untouched.
docs/merge.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from common.kinds import DType

if TYPE_CHECKING:
    from backends.compile.emit import Emission
    from backends.merge.base import Base

DESCRIPTION = """Merge a compiled chip into a Qwen3.5 checkpoint (a text one, or a vision-language
one taken as its text model: Qwen's own Qwen3.5 releases are). The routed layout keeps
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
  deltachip merge ~/models/qwen3.5-text build/merged-calc --firmware calc
  deltachip merge ~/models/qwen3.5-text build/merged-py --firmware calc --firmware python
  deltachip run calc.elf --engine hf --model build/merged-calc --input '2**100'

  then, in Python:
    model = AutoModelForCausalLM.from_pretrained("build/merged", trust_remote_code=True)

  deltachip compile examples/counter/counter.hdl --target ~/models/qwen3.5-text/config.json \
      -o build/counter-q
  deltachip merge ~/models/qwen3.5-text build/stock --chip build/counter-q --layout stock
  deltachip merge ~/models/qwen3.5-text build/stock-calc --firmware calc --layout stock
  deltachip chat build/stock-calc --prompt 'What is 2**100 exactly?' --show-trace

Details, what the layout promises and what it does not support: docs/merge.md.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("merge", help="merge a compiled chip into a Qwen3.5 checkpoint",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", metavar="BASE_DIR", help="a local Qwen3.5 checkpoint directory, "
                   "text or vision-language (its text model is taken; read only, never "
                   "written)")
    p.add_argument("output", metavar="OUT_DIR", help="where the merged checkpoint goes (new, "
                   "empty, or a previous merge output)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--chip", metavar="CHIP_DIR",
                      help="a directory written by `deltachip compile`")
    what.add_argument("--firmware", metavar="PROG", action="append",
                      help="the RISC-V core (cpu/rv32) as the chip, compiled for the base's "
                           "shapes (or taken from the core cache), with this program's memory "
                           "images: a shipped program's name (calc, python (MicroPython), "
                           "hello, ...) or an ELF. Give it more than once for one tool per "
                           "program (--firmware calc --firmware python): a call runs on the "
                           "program whose tool it names")
    p.add_argument("--target", default=None, metavar="T",
                   help="--firmware: the target the core is compiled for (default: "
                        "qwen3.5-4b for a base of Qwen3.5-4B's shapes, else the base's "
                        "config.json)")
    p.add_argument("--tables", choices=["auto", "structured", "plain"], default="auto",
                   help="how the chip's embedding and lm_head are stored: structured (a "
                        "constant row, a palette and a bit per id and column; per token kind "
                        "a base row and a delta per payload bit; expanded exactly by the "
                        "modeling file), plain (byte for byte), auto (default: structured "
                        "when the chip's tables have that structure)")
    p.add_argument("--dtype", choices=[d.value for d in DType], default=None,
                   help="the dtype the merged model runs in (default and only choice: the "
                        "chip's own)")
    from backends.chipdir.merged import LAYOUTS
    p.add_argument("--layout", choices=list(LAYOUTS), default="routed",
                   help="routed (default): base and chip side by side, text bit-identical; "
                        "stock: one widened Qwen3_5ForCausalLM, no remote code, text close "
                        "to the base's")
    p.add_argument("--no-digests", dest="digests", action="store_false",
                   help="merge a --chip directory that has no manifest.json (the size and "
                        "sha256 of each of its files, which `deltachip compile` writes) "
                        "without checking it: a damaged weight or an edited chip.json then "
                        "goes unnoticed (default: such a chip is refused)")
    p.set_defaults(func=merge_command)


def fp32_refused(e: Exception, target: str, layout: str) -> str:
    """--dtype fp32 for a core whose token tables fp32 cannot hold (the compiler's reason,
    said about the dtype, not about the core's source)."""
    why = getattr(e, "diagnostics", None)
    why = why[0].message.split("; token kind")[0] if why else str(e)
    from backends.merge.layouts import LAYOUTS
    reads = " (it reads the base's vocabulary)" if LAYOUTS[layout].reads_text else ""
    return (f"--dtype fp32 is not available for --firmware on this base ({target}): the "
            f"core's {why.removeprefix('the ')}{reads}; merge in bf16 (the default)")


def merge_command(args: argparse.Namespace) -> int:
    import sys
    from common.errors import UserError
    from backends.merge.layouts import LAYOUTS
    layout = LAYOUTS[args.layout]
    say = lambda s: print(f"merge: {s}", file=sys.stderr, flush=True)  # noqa: E731
    from backends.merge.routed import check_out_name
    chip, firmware = args.chip, None
    check_out_name(Path(args.output))       # before a core is compiled for --firmware
    if args.target is not None and args.firmware is None:
        raise UserError("--target applies to --firmware (the core is compiled for it); a "
                        "--chip is merged as it was compiled")
    if args.firmware is not None:
        from backends.merge.base import read_base
        from backends.merge.bridge import text_vocabulary
        from cpu.rv32.merged import core_for, core_target, load_firmwares
        from backends.chipdir.target import get_target
        from backends.compile.rules import VocabularyError
        base = read_base(args.base)
        target = args.target or core_target(base.config, Path(args.base) / "config.json")
        get_target(target)
        firmware = load_firmwares(args.firmware)
        # the routed layout's core reads a tool call's text tokens (the base's vocabulary
        # in its table ROMs); the stock layout's reads bytes
        text = text_vocabulary(base) if layout.reads_text else None
        try:
            chip = core_for(firmware[0], target, args.dtype or "bf16", progress=say,
                            approve=lambda em: _room_for_merge(Path(args.output), base, em),
                            text=text)
        except VocabularyError as e:
            if args.dtype != "fp32":
                raise
            raise UserError(fp32_refused(e, target, args.layout)) from None
        for fw in firmware[1:]:             # one core: the same sizes, text ids and entry
            fw.sizes, fw.core = firmware[0].sizes, firmware[0].core
    r = layout.write(args.base, args.output, chip, args.dtype, say, firmware, args.digests,
                     args.tables)
    print(f"{r.out}: {layout.name} merge, {len(r.shards)} shards{layout.detail(r)}, "
          f"{r.out_bytes:,} bytes "
          f"(base {r.base_bytes:,}, chip {r.chip_bytes:,}; {r.out_bytes / r.base_bytes:.3f}x "
          f"the base), chip tokens {r.token_offset}..{r.token_offset + r.chip_tokens - 1}, "
          f"{r.seconds:.1f} s")
    return 0


def _room_for_merge(out: Path, base: Base, em: Emission) -> None:
    """MergeError unless OUT_DIR's disk has room for the base and the core's decoder layers
    (``em``, its plan: a lower bound of the merge's size, whatever the layout), and for the
    core too when the core cache is on the same disk: asked before the core's weights are
    built, since a core compiled for a narrow MLP has hundreds of layers and takes minutes."""
    import os
    from backends.compile.emit import GROUP_EMBED, GROUP_HEAD
    from backends.chipdir.stfile import MergeError
    from common.outputs import disk_folder, disk_shortfall
    from cpu.rv32.engines import cache_root
    layers = sum(em.nbytes(g) for g in em.groups if g not in (GROUP_EMBED, GROUP_HEAD))
    need = base.nbytes + layers
    if os.stat(cache_root()).st_dev == os.stat(disk_folder(out)).st_dev:
        need += sum(em.nbytes(g) for g in em.groups)
    short = disk_shortfall(out, need)
    if short is not None:
        raise MergeError(f"OUT_DIR {out}: the merge with the core compiled for this base "
                         f"({em.config['num_hidden_layers']} layers) {short}; nothing was "
                         "compiled or written")
