"""Match AST mutants of this tree to another checkout of the project (an older commit whose
mutated files differ only elsewhere), for before/after mutation scores over the same mutants.

    python benchmarks/mutation/match_ids.py AREA AFTER.json OTHER_ROOT

AFTER.json is a ``scripts/mutate.py --json`` result of this tree. A mutant is matched by its
source line, kind, operator or constant and occurrence; it counts only when it is the same
change (the two mutated files differ exactly as the two unmutated files do). Prints one line
per mutant, then the ``--only`` list of the matched ids in OTHER_ROOT.
"""
from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
M = importlib.util.module_from_spec(_spec)
sys.modules["mutate"] = M
_spec.loader.exec_module(M)


def keys(root: Path, path: str) -> tuple[str, list[tuple]]:
    src = (root / path).read_text()
    lines = src.splitlines()
    seen: Counter = Counter()
    out = []
    for node, kind, detail in M._sites(ast.parse(src)):
        op = type(node.ops[detail] if kind == "cmp" else getattr(node, "op", None)).__name__
        val = repr(node.value) if kind in ("int", "flip") else ""
        k = (lines[node.lineno - 1].strip(), kind, op, val)
        seen[k] += 1
        out.append(k + (seen[k],))
    return src, out


def mutate(src: str, k: int) -> str:
    t = ast.parse(src)
    node, kind, detail = M._sites(t)[k]
    t = M._Apply(node, kind, detail).visit(t)
    ast.fix_missing_locations(t)
    return ast.unparse(t)


def changed(a: str, b: str) -> list[str]:
    return [x for x in difflib.unified_diff(a.splitlines(), b.splitlines(), n=0, lineterm="")
            if x[:1] in "+-" and x[:3] not in ("+++", "---")]


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in M.AREAS or "python" not in M.AREAS[argv[0]]:
        print("usage: " + next(x.strip() for x in __doc__.splitlines() if "match_ids.py" in x),
              file=sys.stderr)
        return 2
    area, results, other = argv[0], Path(argv[1]), Path(argv[2])
    missing = [str(x) for x in [results] + [other / f for f in M.AREAS[area]["python"]]
               if not x.is_file()]
    if missing:
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    ids = [r["id"] for r in json.loads(results.read_text()) if r["area"] == area]
    matched = []
    for mid in ids:
        stem, k = mid.split(":")
        path = next(p for p in M.AREAS[area]["python"] if Path(p).stem == stem)
        sa, ka = keys(ROOT, path)
        sb, kb = keys(other, path)
        if ka[int(k)] not in kb:
            print(f"{mid}: no match")
            continue
        j = kb.index(ka[int(k)])
        same = changed(ast.unparse(ast.parse(sb)), ast.unparse(ast.parse(sa))) == \
            changed(mutate(sb, j), mutate(sa, int(k)))
        print(f"{mid} -> {stem}:{j} {'same change' if same else 'DIFFERENT change'}")
        if same:
            matched.append(f"{stem}:{j}")
    print(f"{len(matched)}/{len(ids)} matched")
    print(",".join(matched))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
