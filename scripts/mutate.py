"""Mutation testing: apply one deliberate bug at a time to a copy of the project, run the
tests that should catch it, and report the mutants that survive.

Usage:
    python scripts/mutate.py AREA [AREA ...] [--sample N] [--seed S] [--timeout T]
                             [--list] [--only ID,ID] [--json FILE] [--tests PATH ...]
    python scripts/mutate.py --file PATH --tests TEST [TEST ...]   # any Python file

Areas (``AREAS`` below): ``emulator`` (cpu/emulator.py), ``sim`` (hdl/sim: the code
generator, engines and simulator), ``numerics`` (hand-made mutants of the backend's numerics
constants in backends/compile/emit.py and backends/compile/lower/bits.py) and ``calc`` (hand-made mutants of
firmware/calc/*.c). Python files get mutants from a small AST mutator (:func:`py_mutants`:
arithmetic, bitwise and comparison operators swapped, integer constants +1, booleans and
``and``/``or`` flipped, ``not`` dropped); C files and constants get the hand-made lists
(``C_MUTANTS``, ``NUMERICS_MUTANTS``), each a unique snippet and its replacement.

How: the tracked and unignored files of the working tree are copied once into a temporary
directory; the area's tests must pass there unmutated; then each mutant is written into the
copy, the tests run (``pytest -x -q``, with ``PYTHONPATH`` the copy) under ``--timeout``
seconds, and the file is restored. A mutant is *killed* when the tests fail (or time out),
*survived* when they pass. The summary line is ``AREA: K/N killed (P%)``; survivors are
listed with file:line and the change. Exit status 1 when any mutant survives.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@dataclass(frozen=True)
class Mutant:
    """One change: in ``path`` (relative to the root) replace the whole text with
    ``text``; ``where`` is file:line, ``what`` the change in words."""
    id: str
    path: str
    where: str
    what: str
    text: str


# ---- the Python AST mutator ---------------------------------------------------------------
_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
        ast.Mod: ast.FloorDiv, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
        ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.BitXor: ast.BitOr}
_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
        ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
        ast.NotIn: ast.In}
_SYM = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%",
        ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
        ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
        ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
        ast.And: "and", ast.Or: "or"}


def _skip_lines(tree: ast.Module) -> set[int]:
    """Lines not worth mutating: docstrings and annotations."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skip.update(range(body[0].lineno, body[0].end_lineno + 1))
        for ann in ("annotation", "returns"):
            a = getattr(node, ann, None)
            if a is not None:
                skip.update(range(a.lineno, a.end_lineno + 1))
    return skip


def _sites(tree: ast.Module) -> list[tuple[ast.AST, str, object]]:
    """Every mutation site in source order: (node, kind, detail)."""
    skip = _skip_lines(tree)
    out: list[tuple[ast.AST, str, object]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if line is None or line in skip:
            continue
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BIN:
            out.append((node, "op", None))
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMP:
                    out.append((node, "cmp", i))
        elif isinstance(node, ast.BoolOp):
            out.append((node, "bool", None))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((node, "not", None))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            out.append((node, "flip", None))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            out.append((node, "int", None))
    out.sort(key=lambda s: (s[0].lineno, s[0].col_offset, s[1], str(s[2])))
    return out


class _Apply(ast.NodeTransformer):
    """Applies the mutation at site index ``k`` (same walk order as :func:`_sites`)."""

    def __init__(self, target: ast.AST, kind: str, detail: object):
        self.target, self.kind, self.detail = target, kind, detail
        self.what = ""

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if node is not self.target:
            return node
        k = self.kind
        if k == "op":
            new = _BIN[type(node.op)]
            self.what = f"`{_SYM[type(node.op)]}` -> `{_SYM[new]}`"
            node.op = new()
        elif k == "cmp":
            i = self.detail
            new = _CMP[type(node.ops[i])]
            self.what = f"`{_SYM[type(node.ops[i])]}` -> `{_SYM[new]}`"
            node.ops[i] = new()
        elif k == "bool":
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            self.what = f"`{_SYM[type(node.op)]}` -> `{_SYM[new]}`"
            node.op = new()
        elif k == "not":
            self.what = "`not x` -> `x`"
            return node.operand
        elif k == "flip":
            self.what = f"`{node.value}` -> `{not node.value}`"
            return ast.copy_location(ast.Constant(not node.value), node)
        elif k == "int":
            self.what = f"`{node.value}` -> `{node.value + 1}`"
            return ast.copy_location(ast.Constant(node.value + 1), node)
        return node


def py_mutants(path: str) -> list[Mutant]:
    """Every AST mutant of the Python file ``path`` (relative to the root)."""
    src = (ROOT / path).read_text()
    tree = ast.parse(src)
    n = len(_sites(tree))
    lines = src.splitlines()
    out = []
    for k in range(n):
        t = ast.parse(src)
        node, kind, detail = _sites(t)[k]
        ap = _Apply(node, kind, detail)
        t = ap.visit(t)
        ast.fix_missing_locations(t)
        line = node.lineno
        code = lines[line - 1].strip()
        out.append(Mutant(f"{Path(path).stem}:{k}", path, f"{path}:{line}",
                          f"{ap.what} in `{code[:70]}`", ast.unparse(t) + "\n"))
    return out


def snippet_mutants(prefix: str, table: list[tuple[str, str, str, str]]) -> list[Mutant]:
    """Mutants from (path, old snippet, new snippet, why) rows; each snippet must occur
    exactly once in its file."""
    out = []
    for i, (path, old, new, why) in enumerate(table):
        src = (ROOT / path).read_text()
        if src.count(old) != 1:
            raise SystemExit(f"{path}: snippet {old!r} occurs {src.count(old)} times (need 1)")
        line = src[:src.index(old)].count("\n") + 1
        show = lambda x: " ".join(x.split())
        out.append(Mutant(f"{prefix}:{i}", path, f"{path}:{line}",
                          f"`{show(old)}` -> `{show(new)}` ({why})", src.replace(old, new)))
    return out


# ---- hand-made mutants --------------------------------------------------------------------
B = "firmware/calc/bigint.c"
C = "firmware/calc/calc.c"
C_MUTANTS = [
    (B, "uint32_t s = un[i + j] + vn[i] + c;", "uint32_t s = un[i + j] + vn[i];",
     "add-back step loses its carry"),
    (B, "            top += (int32_t)c;\n", "",
     "add-back step drops the final carry (equivalent: that limb is not read again)"),
    (B, "            qhat--;\n            uint32_t c = 0;", "            uint32_t c = 0;",
     "add-back step keeps the too-large quotient digit"),
    (B, "            if (rhat >= BIG_BASE) break;\n", "",
     "qhat correction loop without its early exit (equivalent: an optimisation)"),
    (B, "while (qhat >= BIG_BASE || qhat * vnext", "while (qhat > BIG_BASE || qhat * vnext",
     "qhat bound off by one (equivalent: the add-back step corrects qhat = BASE)"),
    (B, "qhat * vnext > rhat * BIG_BASE", "qhat * vnext >= rhat * BIG_BASE",
     "qhat test with >="),
    (B, "carry = s >= BIG_BASE;\n            wide[i]", "carry = s > BIG_BASE;\n            wide[i]",
     "addition carry at a limb boundary"),
    (B, "wide[n] = (uint16_t)carry;", "wide[n] = 0;", "addition drops the top carry"),
    (B, "borrow = d < 0;\n        wide[i]", "borrow = d < -1;\n        wide[i]",
     "subtraction borrow"),
    (B, "[nb - 1] + 1), carry = 0;", "[nb - 1] + 2), carry = 0;", "weaker normalisation"),
    (B, "for (int i = 0; i < qn && c; i++)", "for (int i = 0; i < qn - 1 && c; i++)",
     "floor adjustment carry stops one limb early"),
    (B, "if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;", "if (a[i] != b[i]) return a[i] < b[i] ? 1 : -1;",
     "magnitude compare inverted below the top length"),
    (B, "for (int i = na - 1; i >= 0; i--)\n        if (a[i]", "for (int i = na - 1; i > 0; i--)\n        if (a[i]",
     "magnitude compare ignores limb 0"),
    (B, "if (qneg && rn > 0) {", "if (qneg) {", "floor adjustment on exact division"),
    (B, "w[j] = (uint16_t)(t - carry * BIG_BASE);", "w[j] = (uint16_t)(t % 9999);",
     "multiplication limb"),
    (B, "for (int i = start; i < end; i++) v = v * 10", "for (int i = start + 1; i < end; i++) v = v * 10",
     "parsing skips a digit"),
    (B, "if (n > 3402) fail_too_big();", "if (n > 3401) fail_too_big();",
     "power limit one lower (equivalent: 2**3402 is too big anyway)"),
    (C, "    if (t2.neg) { big_neg(&t1, &t1); big_neg(&t2, &t2); }\n",
     "", "division leaves the sign in the denominator"),
    (C, "if (big_is_unit(&t3)) {\n        /* (na*db", "if (0) {\n        /* (na*db",
     "addition fast path off (equivalent: an optimisation)"),
]
E = "backends/compile/emit.py"
LW = "backends/compile/lower/bits.py"
NUMERICS_MUTANTS = [
    (E, "ZSEL = 256 ", "ZSEL = 128 ", "packed-ROM z-gate slope halved (issue 12)"),
    (E, "    k: int = 7          # K = 128", "    k: int = 6          # K = 128", "relu slope K = 64"),
    (E, "    kq: int = 7 ", "    kq: int = 2 ", "key/query magnitude 4"),
    (E, "    vs: int = 5 ", "    vs: int = 3 ", "stored value scale Vs = 8"),
    (E, "    z: int = 6 ", "    z: int = 2 ", "z gate 4"),
    (E, "    b_v: int = 26 ", "    b_v: int = 16 ", "value ballast 2^16"),
    (E, "e = math.ceil((26 + math.log2(sumsq)", "e = math.ceil((8 + math.log2(sumsq)",
     "residual ballast sized for bf16 only"),
    (E, "e = max(e, k4 + 3)", "e = max(e, k4)", "mean square may fall under 16"),
    (E, "bw[:, 0] = 1024.0 / 2.0 ** num.cb", "bw[:, 0] = 16.0 / 2.0 ** num.cb", "beta input 16"),
    (E, 'sd[pre + "linear_attn.dt_bias"] = torch.full((nv,), -1024.0)',
     'sd[pre + "linear_attn.dt_bias"] = torch.full((nv,), -8.0)', "decay not switched off"),
    (LW, "MAX_SPAN = 256", "MAX_SPAN = 512", "pre-activations up to 512 allowed"),
]

AREAS: dict[str, dict] = {
    "emulator": {"python": ["cpu/emulator.py"],
                 "tests": ["tests/cpu/test_emulator.py", "tests/cpu/test_unicorn_diff.py"]},
    "sim": {"python": ["hdl/sim/codegen.py", "hdl/sim/engines.py", "hdl/sim/simulator.py"],
            "tests": ["tests/hdl/test_sim_edges.py", "tests/hdl/test_sim.py"]},
    "numerics": {"snippets": NUMERICS_MUTANTS,
                 "tests": ["tests/backends/verify/test_lanes.py", "tests/backends/verify/test_backend.py"]},
    "calc": {"snippets": C_MUTANTS,
             "tests": ["tests/firmware/test_calc_limbs.py", "tests/firmware/test_calc.py"]},
}


# ---- running ------------------------------------------------------------------------------
def copy_tree(dst: Path) -> None:
    """The tracked and unignored files of the working tree (outside git: every file but
    caches), copied to ``dst``."""
    r = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                       capture_output=True)
    if r.returncode == 0:
        files = r.stdout.decode().split("\0")
    else:
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if p.is_file() and not {".git", "__pycache__", ".venv"} & set(p.parts)]
    for f in files:
        if f and (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)


def run_tests(work: Path, tests: list[str], timeout: float) -> tuple[str, float]:
    """("pass" | "fail" | "timeout", seconds) of the tests in ``work``."""
    env = dict(os.environ, PYTHONPATH=str(work), DELTACHIP_CACHE=str(work / ".mutcache"))
    t0 = time.time()
    try:
        r = subprocess.run([PY, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                           cwd=work, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.time() - t0
    return ("pass" if r.returncode == 0 else "fail"), time.time() - t0


def mutants_of(area: dict, prefix: str) -> list[Mutant]:
    out: list[Mutant] = []
    for path in area.get("python", []):
        out += py_mutants(path)
    if "snippets" in area:
        out += snippet_mutants(prefix, area["snippets"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("areas", nargs="*", metavar="AREA", help=f"one of {', '.join(AREAS)}")
    ap.add_argument("--file", help="mutate this Python file instead of an area")
    ap.add_argument("--tests", nargs="+", help="the tests to run (default: the area's)")
    ap.add_argument("--sample", type=int, help="run a seeded random sample of N mutants per area")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per mutant (default 300)")
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--json", help="write the results to this file")
    a = ap.parse_args(argv)
    jobs: list[tuple[str, list[Mutant], list[str]]] = []
    if a.file:
        if not a.tests:
            ap.error("--file needs --tests")
        jobs.append((a.file, py_mutants(a.file), a.tests))
    for name in [x for x in a.areas if x in AREAS]:
        jobs.append((name, mutants_of(AREAS[name], name), a.tests or AREAS[name]["tests"]))
    if not jobs:
        ap.error("name an AREA or --file")
    for name in a.areas:
        if name not in AREAS:
            ap.error(f"unknown area {name!r} (one of {', '.join(AREAS)})")
    only = set(a.only.split(",")) if a.only else None
    results = []
    survivors_all = 0
    with tempfile.TemporaryDirectory(prefix="deltachip-mutate-") as tmp:
        work = Path(tmp)
        copy_tree(work)
        for name, ms, tests in jobs:
            if only is not None:
                ms = [m for m in ms if m.id in only]
            if a.sample is not None and a.sample < len(ms):
                ms = sorted(random.Random(a.seed).sample(ms, a.sample), key=lambda m: m.id)
            if a.list:
                for m in ms:
                    print(f"{m.id:16} {m.where:34} {m.what}")
                continue
            status, secs = run_tests(work, tests, a.timeout * 3)
            if status != "pass":
                print(f"{name}: the tests do not pass unmutated ({status}): {' '.join(tests)}")
                return 2
            print(f"{name}: {len(ms)} mutants, tests {' '.join(tests)} ({secs:.0f} s unmutated)",
                  flush=True)
            killed = 0
            survivors = []
            for m in ms:
                f = work / m.path
                orig = f.read_text()
                f.write_text(m.text)
                try:
                    status, secs = run_tests(work, tests, a.timeout)
                finally:
                    f.write_text(orig)
                dead = status != "pass"
                killed += dead
                if not dead:
                    survivors.append(m)
                print(f"  {'killed  ' if dead else 'SURVIVED'} {m.id:16} {m.where:34} "
                      f"{m.what} ({status}, {secs:.0f} s)", flush=True)
                results.append({"area": name, "id": m.id, "where": m.where, "what": m.what,
                                "result": status})
            n = len(ms)
            print(f"{name}: {killed}/{n} killed ({100 * killed / max(1, n):.0f}%)")
            for m in survivors:
                print(f"  survivor {m.id} {m.where}: {m.what}")
            survivors_all += len(survivors)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 1 if survivors_all else 0


if __name__ == "__main__":
    sys.exit(main())
