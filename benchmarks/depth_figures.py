"""Depth and memory figures of RV32 building blocks, before and after (docs/backend.md).

Each construct is a small circuit whose operands come from one-word RAMs read at layer 0 and
whose result is written to a RAM (so the result's depth is what is measured); ``stages`` =
the MLP stages between the operands' read and the result (a bare copy: 0 stages, 2 layers;
1 stage is 2 layers as well, k >= 1 stages k + 1 layers). The memory rows
compile memories at the qwen3.5-4b shapes (16 key heads x 128 rows, 32 value heads x 128)
and give layers, key heads and banks. Only scheduling is run (no weights are written).

``--before REV`` runs the same constructs on the code of git revision REV (extracted with
``git archive`` into a temporary directory and run there in a subprocess) and prints both
columns side by side.

Usage: python benchmarks/depth_figures.py [--before REV] [--only 'NAME;...'] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("DELTACHIP_CODE_ROOT", HERE))
sys.path.insert(0, str(CODE))


def _ops_circuit(body: str, decls: str = "") -> str:
    """A circuit reading u32 operands a, b, c, d and a u5 amount n from one-word RAMs."""
    return f"""
import shift; import muldiv; import arith;
circuit T {{
    token Go(x: u1);
    start Go(x: 0);
    ram ra: u32[1]; ram rb: u32[1]; ram rc: u32[1]; ram rd: u32[1]; ram rn: u5[1];
    ram out: u32[1]; ram out1: u1[1];
    {decls}
    let a = ra[0]; let b = rb[0]; let c = rc[0]; let d = rd[0]; let n = rn[0];
    {body}
    next = Go(x: 0);
}}
"""


def _rot(k: int) -> str:
    return "a" if k == 0 else f"{{a[{k - 1}:0], a[31:{k}]}}"


def constructs() -> dict[str, tuple[str, str]]:
    """name -> (HDL source, target)."""
    bits = [f"a[{i}]" for i in range(32)]
    match32 = "var o: u32 = 0;\n    match n {\n" + "".join(
        f"        {k} => {{ o = {_rot(k)}; }}\n" for k in range(32)) + "    }\n    out[0] <= o;"
    ifelse = "var o: u32 = b;\n" + "".join(
        f"    {'if' if k == 0 else 'else if'} n == {k} {{ o = {_rot(k)}; }}\n"
        for k in range(31)) + "    out[0] <= o;"
    cs = {
        "copy u32": "out[0] <= a;",
        "or of 32 bits (||)": "out1[0] <= " + " || ".join(bits) + ";",
        "or of 32 bits (|)": "out1[0] <= " + " | ".join(bits) + ";",
        "and of 32 bits (&&)": "out1[0] <= " + " && ".join(bits) + ";",
        "xor of 32 bits (^)": "out1[0] <= " + " ^ ".join(bits) + ";",
        "a == b (u32)": "out1[0] <= a == b;",
        "a < b (u32)": "out1[0] <= a < b;",
        "a < b (s32)": "out1[0] <= signed(a) < signed(b);",
        "a + b (u32)": "out[0] <= a + b;",
        "a + b + c + d (u32)": "out[0] <= a + b + c + d;",
        "a + b - c (u32)": "out[0] <= a + b - c;",
        "(a < b) ? c : d": "out[0] <= (a < b) ? c : d;",
        "(a == b) ? c : d": "out[0] <= (a == b) ? c : d;",
        "(a + b) == c": "out1[0] <= (a + b) == c;",
        "32-arm match on u5 of u32": match32,
        "31-deep if-else chain of u32": ifelse,
        "a << n (u32)": "out[0] <= a << n;",
        "a >> n (u32)": "out[0] <= a >> n;",
        "a >> n (s32)": "out[0] <= unsigned(signed(a) >> n);",
        "a * b low (u32)": "out[0] <= a * b;",
        "mulh (s32 x s32, high)": "let p = sext(signed(a), 64) * sext(signed(b), 64);\n"
                                  "    out[0] <= unsigned(p[63:32]);",
        "mulhu (u32 x u32, high)": "let p = zext(a, 64) * zext(b, 64);\n    out[0] <= p[63:32];",
        "mulhsu (s32 x u32, high)": "let p = sext(signed(a), 64) * signed(zext(b, 64));\n"
                                    "    out[0] <= unsigned(p[63:32]);",
        "stdlib shl #(W: 32)": "out[0] <= shl #(W: 32)(a, n);",
        "stdlib sra #(W: 32)": "out[0] <= sra #(W: 32)(a, n);",
        "stdlib mul #(W: 32), hi_uu": "out[0] <= mul #(W: 32)(a, b).hi_uu;",
        "stdlib adder_prefix #(W: 32)": "out[0] <= adder_prefix #(W: 32)(a, b, 0).sum;",
    }
    out = {k: (_ops_circuit(v), "compact") for k, v in cs.items()}
    mem = {
        "ROM u32[65536] at a computed address":
            ("rom code: u32[65536];", "out[0] <= code[a[15:0] + b[15:0]];"),
        "RAM u32[8192] load + store":
            ("ram m: u32[8192];", "out[0] <= m[a[12:0]];\n    m[b[12:0]] <= c;"),
        "4 byte-lane RAMs u8[8192] load + store":
            ("ram m0: u8[8192]; ram m1: u8[8192]; ram m2: u8[8192]; ram m3: u8[8192];",
             "out[0] <= {m3[a[12:0]], m2[a[12:0]], m1[a[12:0]], m0[a[12:0]]};\n"
             "    m0[b[12:0]] <= c[7:0]; m1[b[12:0]] <= c[15:8];\n"
             "    m2[b[12:0]] <= c[23:16]; m3[b[12:0]] <= c[31:24];"),
        "register file u32[32], 2 read ports + add":
            ("ram regs: u32[32];", "out[0] <= regs[a[4:0]] + regs[b[4:0]];\n"
                                   "    regs[c[4:0]] <= d;"),
        "docs/cpu.md memory map + regs":
            ("rom code: u32[65536]; rom pre: u64[65536]; rom rodata: u32[32768];\n"
             "    ram m0: u8[8192]; ram m1: u8[8192]; ram m2: u8[8192]; ram m3: u8[8192];\n"
             "    ram regs: u32[32];",
             "let i = pre[a[15:0]];\n"
             "    out[0] <= code[a[15:0]] ^ rodata[b[14:0]] ^ i[31:0] ^ i[63:32] ^\n"
             "      {m3[a[12:0]], m2[a[12:0]], m1[a[12:0]], m0[a[12:0]]} ^ regs[a[4:0]] ^ regs[b[4:0]];\n"
             "    m0[b[12:0]] <= c[7:0]; m1[b[12:0]] <= c[15:8];\n"
             "    m2[b[12:0]] <= c[23:16]; m3[b[12:0]] <= c[31:24];\n"
             "    regs[c[4:0]] <= d;"),
        "transparent RAM u32[8192] load + store":
            ("ram m: u32[8192] transparent;", "out[0] <= m[a[12:0]];\n    m[b[12:0]] <= c;"),
        "docs/cpu.md memory map (transparent word RAM) + regs":
            ("rom code: u32[65536]; rom pre: u64[65536]; rom rodata: u32[32768];\n"
             "    ram m: u32[8192] transparent; ram regs: u32[32];",
             "let i = pre[a[15:0]];\n"
             "    out[0] <= code[a[15:0]] ^ rodata[b[14:0]] ^ i[31:0] ^ i[63:32] ^\n"
             "      m[a[12:0]] ^ regs[a[4:0]] ^ regs[b[4:0]];\n"
             "    m[b[12:0]] <= c;\n    regs[c[4:0]] <= d;"),
        "docs/cpu.md memory map (word RAM) + regs":
            ("rom code: u32[65536]; rom pre: u64[65536]; rom rodata: u32[32768];\n"
             "    ram m: u32[8192]; ram regs: u32[32];",
             "let i = pre[a[15:0]];\n"
             "    out[0] <= code[a[15:0]] ^ rodata[b[14:0]] ^ i[31:0] ^ i[63:32] ^\n"
             "      m[a[12:0]] ^ regs[a[4:0]] ^ regs[b[4:0]];\n"
             "    m[b[12:0]] <= c;\n    regs[c[4:0]] <= d;"),
    }
    for k, (decl, body) in mem.items():
        out[k] = (_ops_circuit(body, decl), "qwen3.5-4b")
    return out


def circuits() -> dict[str, tuple[object, str]]:
    """Whole circuits: name -> (a function giving the Circuit, target): the examples, every
    stdlib wrapper of the verification matrix, two random 1,000-node circuits."""
    import random
    from hdl.frontend import load_circuit
    out: dict[str, tuple[object, str]] = {}
    for ex, top in (("counter", None), ("gcd", "Gcd"), ("stack_machine", None)):
        out[f"example {ex}"] = (lambda ex=ex, top=top: load_circuit(
            CODE / "examples" / ex / f"{ex}.hdl", top), "compact")
    sys.path.insert(0, str(HERE / "tests" / "backends"))
    sys.path.insert(0, str(HERE / "tests" / "hdl"))
    from wrappers import WRAPPERS
    for w in WRAPPERS:
        out[f"wrapper {w.name}"] = (lambda w=w: w.circuit(), "compact")
    from ir_fuzz import random_circuit

    def rnd(seed: int):
        from backends.compile.schedule import DepthRuleError, check_depth_rule
        for s in range(seed, seed + 200):
            c = random_circuit(random.Random(s), n_nodes=1000, n_kinds=3, n_memories=3,
                               halt_kinds=False)
            try:
                check_depth_rule(c)
                return c
            except DepthRuleError:
                pass
    for seed in (100, 200):
        out[f"random 1,000 nodes (seed {seed}+)"] = (lambda seed=seed: rnd(seed), "compact")
    return out


FIGURES = ("layers", "stages", "neurons", "seconds", "key_heads", "mem_layers")


def measure(names: list[str] | None) -> dict[str, dict]:
    """Schedule every construct and circuit with the code under CODE; {name: figures}."""
    from backends.compile.schedule import schedule
    from backends.chipdir.target import get_target
    from hdl.diagnostics import CompileError
    from hdl.frontend import load_source
    res = {}
    items = {k: ((lambda src=src: load_source(src, "<bench>")), tgt)
             for k, (src, tgt) in constructs().items()}
    items.update(circuits())
    for name, (make, tgt) in items.items():
        if names and name not in names:
            continue
        try:
            c = make()
        except CompileError:    # a construct this revision's language lacks
            res[name] = {"target": tgt, **{k: "—" for k in FIGURES}}
            continue
        t0 = time.perf_counter()
        p = schedule(c, get_target(tgt))
        dt = time.perf_counter() - t0
        neurons = sum(len(v) for v in p.mlp.values())
        mems = {m: q for m, q in p.mems.items() if q.depth > 1}
        w = [q.writes[0] for m, q in p.mems.items() if m.startswith("out") and q.writes]
        slot = max([p.lanes[ln].slot for f in w[0].data for ln in f.t] + [0]) if w else None
        res[name] = {"target": tgt, "layers": p.n_layers,
                     "stages": (slot + 1) // 2 if w else "",
                     "neurons": neurons, "seconds": round(dt, 2),
                     "key_heads": sum(q.kheads for q in mems.values()),
                     "mem_layers": len({L for q in mems.values() for L, _ in q.banks})}
    return res


def before(rev: str, names: list[str] | None) -> dict[str, dict]:
    """The same figures on git revision ``rev`` (run in a subprocess on its own code)."""
    with tempfile.TemporaryDirectory() as tmp:
        arch = subprocess.run(["git", "-C", str(HERE), "archive", rev], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
        env = dict(os.environ, DELTACHIP_CODE_ROOT=tmp, PYTHONPATH=tmp)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--json"]
        if names:
            cmd += ["--only", ";".join(names)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", metavar="REV")
    ap.add_argument("--only")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    names = a.only.split(";") if a.only else None
    now = measure(names)
    if a.json:
        print(json.dumps(now))
        return
    old = before(a.before, names) if a.before else {}
    print("| construct | target | layers | stages | neurons | key heads | memory layers |")
    print("|---|---|---|---|---|---|---|")

    def cell(k: str, name: str) -> str:
        v = now[name][k]
        if name in old and k in old[name] and old[name][k] != v:
            return f"{old[name][k]} → {v}"
        return str(v)
    for name in now:
        f = now[name]
        print(f"| {name} | {f['target']} | {cell('layers', name)} | {cell('stages', name)} | "
              f"{cell('neurons', name)} | {cell('key_heads', name)} | {cell('mem_layers', name)} |")


if __name__ == "__main__":
    main()
