"""``deltachip compile``: a circuit -> a chip-only Qwen3.5 checkpoint directory.

Takes: a ``.hdl`` file (its top circuit or ``--top NAME``), ``-o DIR``, a target (``compact``,
``qwen3.5-4b`` or a Qwen3.5 config.json), a dtype, optional ROM images and a plot path.
Gives: DIR/config.json + model.safetensors (``AutoModelForCausalLM.from_pretrained(DIR)``
loads it) + chip.json, written atomically; a summary table on stdout. Exit 0; bad input or
a circuit that breaks the depth rule is a UserError (status 2).
"""
from __future__ import annotations

import argparse

from deltachip.errors import UserError

DESCRIPTION = """Compile a circuit into the weights of Qwen3.5 decoder layers: one clock step per
token, memories in Gated DeltaNet state, logic in SwiGLU MLPs, bit-exact in bf16 and fp32."""

EPILOG = """examples:
  deltachip compile examples/counter/counter.hdl -o build/counter
  deltachip compile cpu.hdl --top Core -o build/core --target qwen3.5-4b --dtype bf16
  deltachip compile gcd.hdl -o build/gcd --target my_qwen/config.json --plot gcd.png

The directory holds config.json, model.safetensors and chip.json (token ids, memory
placement, per-layer usage, the circuit itself and its ROM images), so that
`deltachip check DIR` needs nothing else.
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
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                   help="dtype of the saved weights (default bf16)")
    p.add_argument("--rom", action="append", default=[], metavar="NAME=FILE",
                   help="memory image to bake in (.hex or .bin); repeatable")
    p.add_argument("--plot", metavar="FILE.png", help="plot neurons and heads per layer")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from deltachip.commands.sim import load_circuit
    from backends.compiler import compile_to_dir
    from hdl.sim import load_image
    console = Console(stderr=True)
    circuit = load_circuit(args.file, args.top)
    if not circuit.kinds:
        raise UserError(f"{args.file}: '{circuit.name}' is a module, not a circuit: "
                        "compile a circuit (token kinds and `next`)")
    roms: dict[str, list[int]] = {}
    for spec in args.rom:
        name, eq, file = spec.partition("=")
        if not eq or name not in circuit.memories:
            raise UserError(f"--rom {spec}: expected NAME=FILE with NAME one of the circuit's "
                            f"memories ({', '.join(circuit.memories) or 'none'})")
        m = circuit.memories[name]
        roms[name] = load_image(file, m.width, m.depth, name)
    with console.status("compiling") as status:
        comp = compile_to_dir(circuit, args.output, args.target, args.dtype, roms,
                              progress=lambda s: status.update(s))
    chip = comp.chip
    table = Table(title=f"{circuit.name} -> {args.output} ({chip['target']['name']}, {args.dtype})")
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
    if args.plot:
        plot(chip, args.plot)
    return 0


def plot(chip: dict, path: str) -> None:
    """Bar charts of neurons and key heads per layer."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise UserError("--plot needs matplotlib: pip install 'deltachip[plot]'") from e
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
    fig.savefig(path)
