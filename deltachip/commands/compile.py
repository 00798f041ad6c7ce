"""``deltachip compile``: a circuit -> a chip-only Qwen3.5 checkpoint directory.

Takes: a ``.hdl`` file (its top circuit or ``--top NAME``), ``-o DIR``, a target (``compact``,
``qwen3.5-4b`` or a Qwen3.5 config.json), a dtype, optional ROM images and a plot path.
Gives: DIR/config.json + the weights (model.safetensors, or one shard per layer plus
model.safetensors.index.json above 1 GiB; ``AutoModelForCausalLM.from_pretrained(DIR)``
loads it) + chip.json, written atomically; a summary table on stdout. Exit 0; bad input or
a circuit that breaks the depth rule is a UserError (status 2). ``-o`` and ``--plot`` are
checked before any work: ``-o`` must be new, an empty directory or a previous checkpoint
(nothing else is replaced), and the plot is written to a temporary file, then renamed.
"""
from __future__ import annotations

import argparse
import importlib.util
from contextlib import ExitStack
from pathlib import Path

from common.errors import UserError
from common.kinds import DType
from common.outputs import replace_on_success

DESCRIPTION = """Compile a circuit into the weights of Qwen3.5 decoder layers: one clock step per
token, memories in Gated DeltaNet state, logic in SwiGLU MLPs, bit-exact in bf16 and fp32."""

EPILOG = """examples:
  deltachip compile examples/counter/counter.hdl -o build/counter
  deltachip compile examples/gcd/gcd.hdl -o build/gcd --plot build/gcd.png
  deltachip compile examples/stack_machine/stack_machine.hdl -o build/stack --dtype fp32 --rom prog=examples/stack_machine/program.hex
  deltachip compile examples/counter/counter.hdl -o build/counter-4b --target qwen3.5-4b

The directory holds config.json, the weights (model.safetensors, or above 1 GiB one shard
per layer + model.safetensors.index.json, written one at a time) and chip.json (token ids, memory
placement, per-layer usage, the circuit itself and its ROM images), so that
`deltachip check DIR` needs nothing else. DIR must be new, empty, or a previous checkpoint
(which is replaced once the new one is complete). --target also takes the path of a
Qwen3.5 config.json (its shapes); --plot needs the `plot` extra (matplotlib).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compile", help="compile a circuit into Qwen3.5 weights",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE.hdl", help="the source file")
    p.add_argument("--top", metavar="NAME", help="the circuit to compile (default: the file's top)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--target", default="compact", metavar="compact|qwen3.5-4b|CONFIG.json",
                   help="module shapes to compile for (default compact)")
    p.add_argument("--dtype", choices=[d.value for d in DType], default=DType.BF16.value,
                   help="dtype of the saved weights (default bf16)")
    p.add_argument("--rom", action="append", default=[], metavar="NAME=FILE",
                   help="memory image to bake in (.hex or .bin); repeatable")
    p.add_argument("--plot", metavar="FILE.png", help="plot neurons and heads per layer")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from deltachip.commands.sim import load_circuit
    from backends.chipdir.checkpoint import prepare_output
    from backends.compile.pipeline import compile_to_dir
    from hdl.sim import load_rom_specs
    console = Console(stderr=True)
    prepare_output(args.output)
    circuit = load_circuit(args.file, args.top)
    if not circuit.kinds:
        raise UserError(f"{args.file}: '{circuit.name}' is a module, not a circuit: "
                        "compile a circuit (token kinds and `next`)")
    roms = load_rom_specs(args.rom, circuit.memories, circuit.name)
    with ExitStack() as stack:
        plot_tmp = stack.enter_context(_plot_output(args.plot)) if args.plot else None
        with console.status("compiling") as status:
            comp = compile_to_dir(circuit, args.output, args.target, args.dtype, roms,
                                  progress=lambda s: status.update(s))
        _summary(comp.chip, circuit.name, args, getattr(comp.program, "sched", None))
        if comp.proof is not None:
            print(comp.proof.summary())
        if plot_tmp is not None:
            plot(comp.chip, plot_tmp, Path(args.plot).suffix[1:].lower())
    return 0


def _summary(chip: dict, name: str, args: argparse.Namespace,
             sched: dict | None = None) -> None:
    """The per-layer table, the shapes line and (given the retiming record ``sched`` of
    :func:`backends.compile.retime.retime`) the lanes line, on stdout."""
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"{name} -> {args.output} ({chip['target']['name']}, {args.dtype})")
    for col in ("layer", "neurons", "key heads", "memories", "nonzero weights"):
        table.add_column(col, justify="right")
    for i, lay in enumerate(chip["layers"]):
        table.add_row(str(i), str(lay["neurons"]), str(lay["key_heads"]),
                      ", ".join(lay["memories"]) or "-", f"{lay['nonzero_weights']:,}")
    Console().print(table)
    sh = chip["shapes"]
    print(f"layers {sh['layers']} (+1 empty attention layer), hidden {sh['hidden']} "
          f"({chip['lanes']['count']} lanes + {chip['lanes']['ballast']} ballast), "
          f"MLP {sh['intermediate']}, key heads {sh['key_heads']}, vocab {chip['tokens']['vocab']}, "
          f"nonzero weights {chip['nonzero_weights']:,}")
    if sched:
        print(sched_line(sched))


def sched_line(sched: dict) -> str:
    """One line on retiming, e.g. ``lanes: 35 (ASAP 44), 9 neurons moved to later layers``."""
    moved = sched["moved_neurons"]
    how = (f"{moved} neuron{'s' * (moved != 1)} moved to later layers" if moved
           else "ASAP kept (retiming found no saving)")
    return f"lanes: {sched['dims']} (ASAP {sched['asap_dims']}), {how}"


PLOT_FORMATS = ("png", "svg", "pdf")


def _plot_output(path: str):
    """Check ``--plot PATH`` before compiling: matplotlib present, a known image suffix, a
    writable place; gives the context of :func:`common.outputs.replace_on_success`."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UserError("--plot needs matplotlib, which is not installed: "
                        "pip install 'deltachip[plot]'")
    suffix = Path(path).suffix[1:].lower()
    if suffix not in PLOT_FORMATS:
        raise UserError(f"--plot {path}: unknown image type '{Path(path).suffix}' "
                        f"(use {', '.join('.' + f for f in PLOT_FORMATS)})")
    return replace_on_success(path, "--plot: ")


def plot(chip: dict, path: str | Path, fmt: str = "png") -> None:
    """Bar charts of neurons and key heads per layer, written to ``path`` as ``fmt``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    layers = chip["layers"]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    xs = range(len(layers))
    ax[0].bar(xs, [lay["neurons"] for lay in layers])
    ax[0].set_title(f"MLP neurons (of {chip['shapes']['intermediate']})")
    ax[1].bar(xs, [lay["key_heads"] for lay in layers], color="tab:orange")
    ax[1].set_ylim(0, max(1, chip["shapes"]["key_heads"]))
    ax[1].set_title(f"GDN key heads (of {chip['shapes']['key_heads']})")
    for a in ax:
        a.set_xlabel("layer")
        a.set_xticks(list(xs))
    fig.tight_layout()
    fig.savefig(path, format=fmt)
    plt.close(fig)
