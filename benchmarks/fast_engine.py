"""The fast engine against transformers on the compiled core, side by side in one run.

Prints: the CPU's bf16 features; the engine's load from the checkpoint (every weight read,
made sparse and verified) beside its load from the stored sparse form (mapped), the two
models compared array for array, and the wall time of a second ``deltachip run product.elf
--engine fast`` in a new process (the load included) beside its parts, each timed in the
process (imports, the ELF, the core cache's check, chip.json, the model, the kernel, the ROM
state, the run; ``--only-run``: this alone), and the heavy modules it imported (none);
single-stream tokens/s of fast and hf on the same trace
(hf on its first ``--hf-tokens`` positions only) and their ratio; the batched aggregate of
``--batch`` streams on ``--threads`` threads; per C program the wall time, tokens and
instructions per second on the fast engine (``deltachip run --engine fast``'s path), each
outcome checked against the golden emulator. Medians of ``--repeats`` runs.

    python benchmarks/fast_engine.py [--target compact|qwen3.5-4b] [--batch 64] [--threads 2]
                                     [--repeats 3] [--program-repeats 1] [--load-repeats 3]
                                     [--only-load | --only-run]

The programs' wall time is ``deltachip run --engine fast``'s run (the load excluded), set
beside the fastest public peer's published figures (``peer s``; ``peer/ours`` > 1: faster).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


#: the parts of a ``--time-run-cold`` run quoted: the model's load; all of it
COLD, ALL = "the fast model (from the checkpoint)", "in all, from the first import"
#: the modules a fast run must not import (each takes a second or more, or a good part of
#: one, and running the stored core needs none of them)
HEAVY = ("torch", "transformers", "networkx", "lark")


def time_run(argv: list[str], cold: bool = False) -> int:
    """``deltachip ARGV`` in this process (started for it, nothing imported yet) with the
    seconds of each part of a fast run printed to stderr as JSON: imports, the ELF, the
    core cache's checks, chip.json, the fast model, the kernel, the ROM images, the run,
    and what is left (argument parsing, output, the reader's setup); then the heavy
    modules (:data:`HEAVY`) the run imported and its peak RSS. ``cold``: the model loaded
    from the checkpoint (as before the stored form)."""
    import json
    t0, parts = time.perf_counter(), {}

    def timed(owner, name: str, label: str) -> None:
        f = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                parts[label] = parts.get(label, 0.0) + time.perf_counter() - t
        setattr(owner, name, wrapper)

    for label, mods in (("import numpy", ["numpy"]),
                        ("import the project", ["deltachip.cli", "deltachip.commands.run",
                                                "cpu.rv32.engines", "backends.engines.fast.engine"])):
        t = time.perf_counter()
        for m in mods:
            __import__(m)
        parts[label] = time.perf_counter() - t
    import deltachip.cli
    import backends.engines.base as be
    import backends.engines.fast.engine as fe
    import cpu.rv32.engines as ce
    from backends.engines.fast import stored
    timed(ce, "load_program", "the ELF loaded")
    timed(ce, "compiled_core", "the core cache's entry (core hash, digests)")
    timed(ce, "load_core", "the core's HDL elaborated")
    timed(be.ChipEngine, "__init__", "chip.json (circuit, digests)")
    timed(stored, "load", "the fast model (stored sparse form)")
    timed(fe, "make_kernel", "the C kernel")
    timed(fe.FastEngine, "new_cache", "the ROM images into the state")
    timed(ce.FastCore, "run", "the program's run")
    if cold:
        init = fe.FastEngine.__init__
        fe.FastEngine.__init__ = lambda self, *a, **k: init(self, *a, **k, sparse_form=False)
        timed(fe.fmodel, "load", "the fast model (from the checkpoint)")
    rc = deltachip.cli.main(argv)
    parts[ALL] = time.perf_counter() - t0
    parts["the rest (arguments, output, the reader)"] = 2 * parts[ALL] - sum(parts.values())
    with open("/proc/self/status") as f:        # this program's peak, not its parent's
        hwm = [line.split()[1] for line in f if line.startswith("VmHWM:")]
    print(json.dumps(parts), file=sys.stderr)
    print(json.dumps({"peak RSS MiB": int(hwm[0]) / 1024 if hwm else float("nan"),
                      "imported": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
    return rc


if __name__ == "__main__" and sys.argv[1:2] in (["--time-run"], ["--time-run-cold"]):
    sys.exit(time_run(sys.argv[2:], cold=sys.argv[1] == "--time-run-cold"))

import torch  # noqa: E402

from cpu.emulator import Machine  # noqa: E402
from cpu.rv32.engines import compiled_core, fast_engine  # noqa: E402
from cpu.rv32.loader import load_program  # noqa: E402
from firmware import toolchain  # noqa: E402

from benchmarks.programs import PROGRAMS  # noqa: E402


def cpu_flags() -> str:
    """The CPU's model name and which of its bf16 features lscpu lists."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    model = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                  if line.startswith("Model name:")), "unknown model")
    flags = " ".join(sorted({f for f in ("avx512_bf16", "amx_bf16", "avx2") if f in out}))
    return f"{model}; {flags}"


def stream_rate(engine, image, n: int, repeats: int) -> tuple[float, int]:
    """Median tokens/s of one stream free-running ``n`` tokens from the start."""
    rates = []
    for _ in range(repeats):
        cache = engine.new_cache(1, [image.images])
        t0 = time.perf_counter()
        ids = engine.run(cache, 0, engine.token_id(image.start), n)
        rates.append(len(ids) / (time.perf_counter() - t0))
    return statistics.median(rates), len(ids)


def hf_rate(path, image, n: int) -> float:
    from backends.engines.hf import HFEngine
    eng = HFEngine(path, roms=image.images)
    cache = eng.new_cache(1)
    tid = eng.token_id(image.start)
    eng.decode_step([tid], cache)                   # warm-up
    t0 = time.perf_counter()
    for _ in range(n):
        tid = int(eng.decode_step([tid], cache)[0])
    return n / (time.perf_counter() - t0)


def _wall(cmd: list[str], want: bytes = b"") -> tuple[float, float, str]:
    """Wall seconds and CPU seconds (user + system) of ``cmd`` in a new process, which must
    print ``want`` and exit 0; its stderr."""
    import tempfile
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        got, said = out.read(), err.read().decode()
    if proc.returncode != 0 or got != want:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}, printed {got!r} (not "
                         f"{want!r}); stderr: {said}")
    return wall, ru.ru_utime + ru.ru_stime, said


def timed_run(argv: list[str], want: bytes, flag: str = "--time-run"
              ) -> tuple[float, dict[str, float], dict]:
    """``deltachip ARGV`` under :func:`time_run` in a new process (``flag``: ``--time-run``
    or ``--time-run-cold``), which must print ``want``: its wall seconds, the seconds of
    each part and the facts (peak RSS, heavy modules imported) it reported."""
    import json
    wall, _, said = _wall([sys.executable, __file__, flag] + argv, want)
    lines = said.strip().splitlines()
    return wall, json.loads(lines[-2]), json.loads(lines[-1])


def single_stream_process(elf: Path, target: str, repeats: int) -> None:
    """Print ``deltachip run ELF --engine fast`` in a new process (medians of ``repeats``):
    its wall time, the program's run as :func:`time_run` times it, and
    the process's peak RSS (VmHWM read in that process: ru_maxrss of a child forked from
    this one would count this process's pages; the model's mapped pages that were read
    count as resident)."""
    want = Machine.from_elf(elf).run(10**8).output
    argv = ["run", str(elf.resolve()), "--engine", "fast", "--target", target]
    walls, runs, rss = [], [], []
    for _ in range(repeats):
        wall, parts, facts = timed_run(argv, want)
        walls.append(wall)
        runs.append(parts["the program's run"])
        rss.append(facts["peak RSS MiB"])
    print(f"single stream in a process of its own (`deltachip run {elf.name} --engine fast`, "
          f"median of {repeats}): {statistics.median(walls):.2f} s wall, the run "
          f"{statistics.median(runs):.2f} s, peak RSS {statistics.median(rss):,.0f} MiB")


def second_run(product: Path, target: str, repeats: int, cold: bool = True) -> None:
    """Print the median wall time of ``deltachip run product.elf --engine fast`` in a new
    process (its CPU seconds, peak RSS, the heavy modules it imported) beside the median
    seconds of each part of the run (:func:`time_run`, in processes of their own,
    alternating with the others) and the wall time of a process that starts Python alone
    and one that imports numpy alone. ``cold``: also the same run with the model loaded
    from the checkpoint (once)."""
    py, want = [sys.executable], Machine.from_elf(product).run(10**6).output
    argv = ["run", str(product.resolve()), "--engine", "fast", "--target", target]
    runs, bare, empty, parts, info = [], [], [], [], []
    for _ in range(repeats):
        runs.append(_wall(py + ["-m", "deltachip"] + argv, want)[:2])
        empty.append(_wall(py + ["-c", "pass"])[0])
        bare.append(_wall(py + ["-c", "import numpy"])[0])
        _, got, facts = timed_run(argv, want)
        parts.append(got)
        info.append(facts)
    run, used = (statistics.median(r[i] for r in runs) for i in range(2))
    rss = statistics.median(f["peak RSS MiB"] for f in info)
    heavy = sorted({m for f in info for m in f["imported"]})
    print(f"second `deltachip run product.elf --engine fast --target {target}` (a new process, "
          f"median of {repeats}): {run:.2f} s wall (target <= 2 s: "
          f"{'met' if run <= 2 else 'NOT met'}), {used:.2f} s CPU (user + system), peak RSS "
          f"{rss:,.0f} MiB; imported of {', '.join(HEAVY)}: {', '.join(heavy) or 'none'}")
    print(f"  beside it: a process that starts Python alone {statistics.median(empty):.3f} s "
          f"wall, one that imports numpy alone {statistics.median(bare):.3f} s")
    keys = list(dict.fromkeys(k for p in parts for k in p))
    total = statistics.median(p[ALL] for p in parts)
    print(f"  the parts of the run, timed in the process (medians of {repeats}):")
    print(f"  {'s':>7} {'share':>6}  part")
    for k in keys:
        if k == ALL:
            continue
        m = statistics.median(p.get(k, 0.0) for p in parts)
        print(f"  {m:7.3f} {m / total:6.1%}  {k}")
    print(f"  {total:7.3f} {1:6.0%}  {ALL} (the wall time above also counts Python's start "
          f"and exit)")
    if cold:
        _, cparts, cinfo = timed_run(argv, want, "--time-run-cold")
        print(f"  the same run with the model from the checkpoint (once): {cparts[ALL]:.2f} s "
              f"from the first import, the model {cparts[COLD]:.2f} s, peak RSS "
              f"{cinfo['peak RSS MiB']:,.0f} MiB")


def load_figures(path: Path, image, target: str, threads: int, repeats: int, out: Path):
    """Print the load from the checkpoint beside the load from the stored sparse form (the
    engine as a program gets it; medians of ``repeats``, the page cache warm), the two
    models compared array for array, and a second ``deltachip run`` of product in a new
    process; return the engine loaded from the stored form."""
    from backends.engines.fast.engine import FastEngine
    from backends.engines.fast.stored import first_difference
    from backends.engines.fast import stored
    form = stored.place(path, stored.checkpoint_key(path)[0])
    had = (form / stored.WEIGHTS).stat().st_mtime_ns if (form / stored.WEIGHTS).exists() else 0
    t0 = time.perf_counter()
    FastEngine(path, roms=image.images, threads=threads)     # stores the form if none is
    first = time.perf_counter() - t0
    if not had or (form / stored.WEIGHTS).stat().st_mtime_ns != had:
        size = (form / stored.WEIGHTS).stat().st_size
        print(f"first load: from the checkpoint, the sparse form stored ({size / 2**20:,.0f} "
              f"MiB in {form}): {first:.2f} s")
    cold, warm = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ce = FastEngine(path, roms=image.images, threads=threads, sparse_form=False)
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        eng = FastEngine(path, roms=image.images, threads=threads)
        warm.append(time.perf_counter() - t0)
    same = first_difference(eng.model, ce.model)
    del ce
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"load (FastEngine, median of {repeats}): from the checkpoint {c:.2f} s, from the "
          f"stored sparse form {w:.3f} s ({c / w:,.0f}x); the two models "
          + ("equal, array for array" if same is None else f"DIFFER: {same}"))
    second_run(toolchain.build(toolchain.shipped_programs()["product"], out / "product.elf"),
               target, repeats)
    return eng


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="compact")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=20000, help="tokens per stream timed")
    ap.add_argument("--hf-tokens", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--program-repeats", type=int, default=1)
    ap.add_argument("--no-programs", action="store_true")
    ap.add_argument("--load-repeats", type=int, default=3)
    ap.add_argument("--only-load", action="store_true", help="the load figures alone")
    ap.add_argument("--only-run", action="store_true",
                    help="a second `deltachip run` of product alone (--load-repeats runs; "
                         "no run with the model from the checkpoint)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"CPU: {os.cpu_count()} cores, {cpu_flags()}; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; target {a.target}, bf16")
    path = compiled_core(target=a.target)
    out = Path("build/bench")
    out.mkdir(parents=True, exist_ok=True)
    if a.only_run:
        second_run(toolchain.build(toolchain.shipped_programs()["product"], out / "product.elf"),
                   a.target, a.load_repeats, cold=False)
        return
    sieve = toolchain.build(toolchain.shipped_programs()["sieve"], out / "sieve.elf")
    image = load_program(sieve, None)
    eng = load_figures(path, image, a.target, a.threads, a.load_repeats, out)
    if a.only_load:
        return

    fast1, n = stream_rate(eng, image, a.tokens, a.repeats)
    hf1 = hf_rate(path, image, a.hf_tokens)
    print(f"single stream (sieve's first tokens): fast {fast1:,.0f} tokens/s ({n:,} tokens), "
          f"hf {hf1:,.2f} tokens/s ({a.hf_tokens} tokens): fast/hf = {fast1 / hf1:,.0f}x")

    single_stream_process(sieve, a.target, 1)

    cache = eng.new_cache(a.batch, [image.images] * a.batch)
    first = eng.token_id(image.start)
    per = max(1, a.tokens // 8)
    t0 = time.perf_counter()
    done = sum(len(x) for x in eng._each(lambda b: eng.run(cache, b, first, per), a.batch))
    agg = done / (time.perf_counter() - t0)
    print(f"batched: {a.batch} streams x {per:,} tokens on {a.threads} threads: "
          f"{agg:,.0f} tokens/s aggregate")
    del cache

    if a.no_programs:
        return
    print(f"{'program':28} {'wall s':>8} {'tokens':>9} {'instr':>9} {'tokens/s':>9} "
          f"{'instr/s':>9}  = ref  {'peer s':>7} {'peer/ours':>9}")
    for label, name, text, peer in PROGRAMS:
        elf = toolchain.build(toolchain.shipped_programs()[name], out / f"{name}.elf")
        times = []
        for _ in range(a.program_repeats):
            core = fast_engine(elf, text, target=a.target)
            t0 = time.perf_counter()
            r = core.run(10**8)
            times.append(time.perf_counter() - t0)
        want = Machine.from_elf(elf, text).run(10**8)
        same = (r.exit_code, r.output, r.instructions) == (want.exit_code, want.output,
                                                           want.instructions)
        w = statistics.median(times)
        tok = core.reader.tokens
        vs = f"{peer:7.2f} {peer / w:8.2f}x" if peer else f"{'-':>7} {'-':>9}"
        print(f"{label:28} {w:8.3f} {tok:9,} {r.instructions:9,} {tok / w:9,.0f} "
              f"{r.instructions / w:9,.0f}  {'yes ' if same else 'NO  '} {vs}")


if __name__ == "__main__":
    main()
