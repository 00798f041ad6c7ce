"""Figures of the shipped core (cpu/rv32): what it compiles to, and tokens per instruction.

    python benchmarks/core_figures.py                       # full table (compiles twice)
    python benchmarks/core_figures.py --no-compile          # programs only (minutes less)
    python benchmarks/core_figures.py --sizes tiny --no-compile --programs sum

Prints two Markdown tables for the core as cpu/rv32/*.hdl stands now:

1. per target (``--targets``, default ``qwen3.5-4b,compact``; skipped with ``--no-compile``):
   decoder layers, nonzero weights in the decoder layers, nonzero weights of the vocabulary
   rows (embedding + lm_head, with the final norm), vocabulary size, hidden width, and the
   compile: seconds from source to a written checkpoint (elaborate, compile, write) and the
   peak resident memory of the process that did it. Each compile runs in its own Python
   subprocess (so the peak is that compile's alone: ``ru_maxrss``), into a temporary folder
   that is deleted afterwards (``--cache`` keeps it as the core cache's entry for that
   target/dtype when none is there, so ``deltachip run --engine hf`` reuses it). A target
   the compile rules refuse (docs/language.md, "Compile rules") gets a row with the reason;
   when what is refused is the size of the token tables, the row still gives the decoder
   layers and their nonzero weights at that target's shapes (planned past that one rule,
   each layer's tensors built and counted, nothing written);
2. per firmware program (every program ``firmware.toolchain.shipped_programs`` lists, i.e.
   firmware/programs/*.c, and calc on each ``--calc-input``, default ``2**100``), built with
   the default toolchain at -O2 and run on the core in the reference simulator (engine
   ``sim``; the compiled core is checked to give the same token at every position, so the
   counts are those of ``hf``): instructions retired, tokens, tokens per instruction, and the
   tokens by kind; then the mean of tokens per instruction over the programs and the
   overall ratio (all tokens / all instructions). Every run's output, exit code and
   instruction count are checked against the golden emulator (``ref``). A program that does
   not fit a small core (``--sizes``) gets a row saying so.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpu.emulator import Machine  # noqa: E402
from cpu.rv32.build import FULL, SMALL, TINY, CoreSizes, load_core  # noqa: E402
from cpu.rv32.engines import BYTE_CELLS  # noqa: E402
from cpu.rv32.loader import CoreLoadError, image_of  # noqa: E402
from firmware import toolchain  # noqa: E402

SIZES = {"full": FULL, "small": SMALL, "tiny": TINY}
CALC_INPUTS = ["2**100"]
MAX_INSTRUCTIONS = 50_000_000


# ---------------------------------------------------------------- compile figures

def compile_child(sizes_name: str, target: str, dtype: str, out: str) -> None:
    """In the subprocess: compile the core into ``out`` and print one JSON line. When the
    compile rules refuse the core's token tables at ``target``, the core is planned past that
    one rule and each decoder layer's tensors are built and counted (not written): the
    layers' figures at the target's shapes, beside the refusal."""
    from backends.compile import emit, rules
    from backends.compile.pipeline import plan_circuit, write_dir
    from common.errors import UserError
    t0 = time.perf_counter()
    row: dict = {"error": None}
    circuit = load_core(SIZES[sizes_name])
    tables_refused = False
    try:                                # planned once; the table rule checked after it
        em = plan_circuit(circuit, target, dtype, byte_cells=BYTE_CELLS, table_rule=False)
        try:
            rules.check_tables(circuit, em.num.hidden, dtype)
        except rules.VocabularyError:
            tables_refused = True
            raise
        write_dir(em, out)
    except UserError as e:              # a compile rule refuses the core at this target
        row["error"] = str(e)
    if tables_refused:                  # count the layers all the same
        nonzero = sum(sum(emit.nonzero_counts(emit.group_tensors(em, g)).values())
                      for g in em.groups if g.startswith("layers."))
        row.update({"layers": em.prog.n_layers, "nonzero_layers": nonzero, "vocab": em.vocab,
                    "hidden": em.num.hidden})
    row["seconds"] = time.perf_counter() - t0
    row["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB
    print(json.dumps(row))


def chip_figures(chip: dict) -> dict:
    """Layers and nonzero weights from a checkpoint's chip.json."""
    layers = chip["layers"]
    in_layers = sum(layer["nonzero_weights"] for layer in layers)
    return {"layers": len(layers), "nonzero_layers": in_layers,
            "nonzero_vocab": chip["nonzero_weights"] - in_layers,
            "vocab": chip["tokens"]["vocab"], "hidden": chip["shapes"]["hidden"]}


def measure_compile(sizes_name: str, target: str, dtype: str, workdir: str | None,
                    keep_in_cache: bool) -> dict:
    """Compile the core for ``target`` in a subprocess; its figures, time and peak RSS."""
    with tempfile.TemporaryDirectory(prefix="core-figures-", dir=workdir) as tmp:
        out = Path(tmp) / "chip"
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--compile-child",
                               sizes_name, target, dtype, str(out)],
                              capture_output=True, text=True, check=False, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"compiling the core for {target} failed:\n{proc.stderr[-4000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        if row["error"]:
            return row
        row.update(chip_figures(json.loads((out / "chip.json").read_text())))
        row["checkpoint_bytes"] = sum(f.stat().st_size for f in out.iterdir())
        if keep_in_cache:
            from cpu.rv32.engines import compiled_core_path, remove_stale_cores
            dest = compiled_core_path(SIZES[sizes_name], target, dtype)
            if not os.path.lexists(dest):       # an entry there, whole or not, is the cache's
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(out), str(dest))
                remove_stale_cores(SIZES[sizes_name], target, dtype)
    return row


def compile_table(rows: list[tuple[str, dict]], sizes: CoreSizes, dtype: str) -> str:
    head = ["target", "layers", "nonzero weights, decoder layers",
            "nonzero weights, vocabulary (embedding + lm_head)", "vocabulary", "hidden",
            "checkpoint", "compile s", "compile peak RSS"]
    lines = [f"Core `{sizes.name}`, {dtype}:", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for target, r in rows:
        if r["error"]:
            why = r["error"].splitlines()[0].split(": error: ", 1)[-1].replace("|", "/")
            if "layers" not in r:
                lines.append(f"| {target} | refused by the compile rules after "
                             f"{r['seconds']:.0f} s: {why} |" + " |" * (len(head) - 2))
                continue
            lines.append(f"| {target} | {r['layers']} | {r['nonzero_layers']:,} | not built: "
                         f"refused by the compile rules ({why}) | {r['vocab']:,} "
                         f"| {r['hidden']:,} | not written (layers built and counted) "
                         f"| {r['seconds']:.0f} "
                         f"| {r['peak_rss_bytes'] / 1e9:.2f} GB |")
            continue
        lines.append(f"| {target} | {r['layers']} | {r['nonzero_layers']:,} | {r['nonzero_vocab']:,} "
                     f"| {r['vocab']:,} | {r['hidden']:,} | {r['checkpoint_bytes'] / 1e9:.2f} GB "
                     f"| {r['seconds']:.0f} | {r['peak_rss_bytes'] / 1e9:.2f} GB |")
    return "\n".join(lines)


# ---------------------------------------------------------------- tokens per instruction

def run_one(elf: Path, text: str | None, sizes: CoreSizes) -> dict:
    """Run ``elf`` (with input ``text``) on the core in the simulator; counts by kind.
    Raises AssertionError when the outcome differs from the golden emulator's."""
    from cpu.rv32.engines import SimCore
    data = None if text is None else text.encode()
    ref = Machine.from_elf(elf, data).run(MAX_INSTRUCTIONS)
    eng = SimCore(image_of(Machine.from_elf(elf, data), sizes), sizes)
    kinds: Counter[int] = Counter()
    t0 = time.perf_counter()
    while not eng.reader.done and eng.reader.instructions <= MAX_INSTRUCTIONS:
        kinds[eng.cur.kind] += 1
        eng._advance(None)
    kinds[eng.cur.kind] += 1
    seconds = time.perf_counter() - t0
    r = eng.reader
    assert (r.exit_code, bytes(r.output), r.instructions) == \
        (ref.exit_code, ref.output, ref.instructions), f"{elf.name} {text!r}: sim differs from ref"
    return {"instructions": r.instructions, "tokens": r.tokens,
            "tpi": r.tokens / r.instructions, "kinds": kinds, "seconds": seconds}


def program_runs(names: list[str] | None, calc_inputs: list[str]) -> list[tuple[str, str, str | None]]:
    """(label, program name, input) for every run of the table."""
    progs = toolchain.shipped_programs()
    if names:
        unknown = [n for n in names if n not in progs]
        if unknown:
            raise SystemExit(f"unknown program(s) {', '.join(unknown)}; "
                             f"shipped: {', '.join(progs)}")
    chosen = [n for n in progs if not names or n in names]
    runs: list[tuple[str, str, str | None]] = []
    for n in chosen:
        if n == "calc":
            runs += [(f"calc `{t}`", n, t) for t in calc_inputs]
        else:
            runs.append((n, n, None))
    return runs


def program_table(runs: list[tuple[str, str, str | None]], sizes: CoreSizes,
                  workdir: str | None) -> tuple[str, list[tuple[str, dict | None]]]:
    kind_names = [k.name for k in load_core(sizes).kinds]
    progs = toolchain.shipped_programs()
    results: list[tuple[str, dict | None]] = []
    with tempfile.TemporaryDirectory(prefix="core-figures-", dir=workdir) as tmp:
        for label, name, text in runs:
            elf = Path(tmp) / f"{name}.elf"
            if not elf.exists():
                toolchain.build(progs[name], elf)
            try:
                results.append((label, run_one(elf, text, sizes)))
            except CoreLoadError as e:
                results.append((label + f" (does not fit: {e})", None))
    head = ["program", "instructions", "tokens", "tokens/instr", *kind_names]
    lines = [f"Core `{sizes.name}`, engine sim:", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    done = [(label, r) for label, r in results if r is not None]
    for label, r in results:
        if r is None:
            lines.append(f"| {label} |" + " |" * (len(head) - 1))
            continue
        split = " | ".join(f"{r['kinds'].get(i, 0):,}" for i in range(len(kind_names)))
        lines.append(f"| {label} | {r['instructions']:,} | {r['tokens']:,} | {r['tpi']:.3f} | {split} |")
    if done:
        mean = sum(r["tpi"] for _, r in done) / len(done)
        ins = sum(r["instructions"] for _, r in done)
        toks = sum(r["tokens"] for _, r in done)
        lines.append(f"| **mean over {len(done)} programs** | | | **{mean:.3f}** |"
                     + " |" * len(kind_names))
        lines.append(f"| all programs together | {ins:,} | {toks:,} | {toks / ins:.3f} |"
                     + " |" * len(kind_names))
    return "\n".join(lines), results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--compile-child"]:
        compile_child(*argv[1:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", choices=SIZES, default="full",
                    help="the core's memory sizes (default full: the memory map's)")
    ap.add_argument("--targets", default="qwen3.5-4b,compact",
                    help="comma-separated compile targets (default qwen3.5-4b,compact)")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--no-compile", action="store_true", help="skip the compile table")
    ap.add_argument("--no-programs", action="store_true", help="skip the programs table")
    ap.add_argument("--programs", default="",
                    help="comma-separated shipped programs (default: all of them)")
    ap.add_argument("--calc-input", action="append", default=None,
                    help="an input for calc (repeatable; default 2**100)")
    ap.add_argument("--cache", action="store_true",
                    help="keep each compiled checkpoint as the core cache's entry")
    ap.add_argument("--workdir", default=None, help="where the temporary checkpoints go")
    args = ap.parse_args(argv)
    sizes = SIZES[args.sizes]
    if not args.no_compile:
        targets = [t for t in args.targets.split(",") if t]
        rows = []
        for t in targets:
            rows.append((t, measure_compile(args.sizes, t, args.dtype, args.workdir, args.cache)))
        print(compile_table(rows, sizes, args.dtype))
        print()
    if not args.no_programs:
        names = [n for n in args.programs.split(",") if n] or None
        table, _ = program_table(program_runs(names, args.calc_input or CALC_INPUTS), sizes,
                                 args.workdir)
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
