"""The project's import graph: no cycle between modules, and dependencies point down.

Floors (docs/backend.md, "Layers"): ``common`` and ``stdlib`` at the bottom, then ``hdl``, then
``backends``, ``cpu`` and ``firmware``, then ``deltachip`` (the command line and the public
API) on top. A module may import from its own floor or below, never from above; packages on
one floor may use each other only without a cycle. Every ``import`` counts, wherever it is
written: at module level, inside a function, under ``if TYPE_CHECKING``.

Inside ``backends`` the roles have floors of their own (:data:`ROLES`): ``chipdir`` (files)
at the bottom, the compiler (``compile``) and the runtimes (``engines``) above it, neither
importing the other, then ``verify`` and ``merge``, neither importing the other.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: package -> floor; a module imports only from packages on its floor or below.
FLOORS = {"common": 0, "stdlib": 0, "hdl": 1, "backends": 2, "cpu": 2, "firmware": 2,
          "deltachip": 3}
LIBRARIES = [p for p in FLOORS if p != "deltachip"]
#: backends' sub-packages -> floor; a module imports only from its own sub-package or one on a
#: lower floor (two roles on one floor never import each other)
ROLES = {"chipdir": 0, "compile": 1, "engines": 1, "verify": 2, "merge": 2}


def project_modules(root: Path, packages) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``
    (a package's ``__init__.py`` is the package's own name)."""
    modules = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` names: itself, or its longest prefix that is a module
    (``hdl.ir.Circuit`` -> ``hdl.ir``); None outside the project."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported project module, line) for every import statement anywhere in ``path``.
    ``from pkg import name`` is an import of the module ``pkg.name`` when that is a module
    (a submodule), else of ``pkg``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[:len(anchor) - node.level + is_package]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for name in targets:
            target = _resolve(name, modules)
            if target is not None and target != module:
                out.append((target, node.lineno))
    return out


def import_graph(root: Path = ROOT, packages=tuple(FLOORS)) -> nx.DiGraph:
    """Modules of ``packages`` as nodes; an edge a -> b when a imports b, with ``where``
    (``path:line`` of the first such import)."""
    modules = project_modules(root, packages)
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for module, path in modules.items():
        for target, line in imports_of(module, path, modules):
            if not g.has_edge(module, target):
                g.add_edge(module, target, where=f"{path.relative_to(root)}:{line}")
    return g


def cycles(g: nx.DiGraph) -> list[str]:
    """One cycle per strongly connected component, as ``a -> b (file:line)`` hops."""
    found = []
    for component in nx.strongly_connected_components(g):
        if len(component) < 2:
            continue
        cycle = nx.find_cycle(g.subgraph(component))
        found.append("\n".join(f"  {a} imports {b} ({g.edges[a, b]['where']})" for a, b in cycle))
    return found


def package(module: str) -> str:
    return module.split(".")[0]


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph()


def test_no_import_cycle(graph):
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n\n".join(found)


def test_no_library_imports_the_command_line(graph):
    bad = [f"{a} imports {b} ({w})" for a, b, w in graph.edges(data="where")
           if package(a) in LIBRARIES and package(b) == "deltachip"]
    assert not bad, "library modules importing deltachip/:\n" + "\n".join(bad)


def test_imports_point_down_the_floors(graph):
    bad = [f"{a} (floor {FLOORS[package(a)]}) imports {b} (floor {FLOORS[package(b)]}) ({w})"
           for a, b, w in graph.edges(data="where")
           if FLOORS[package(a)] < FLOORS[package(b)]]
    assert not bad, "imports pointing up:\n" + "\n".join(bad)


def test_packages_form_no_cycle(graph):
    packages = nx.DiGraph()
    for a, b, w in graph.edges(data="where"):
        if package(a) != package(b) and not packages.has_edge(package(a), package(b)):
            packages.add_edge(package(a), package(b), where=w)
    found = cycles(packages)
    assert not found, "package cycles:\n" + "\n\n".join(found)


def role(module: str) -> str | None:
    """The backends sub-package of ``module`` (None outside backends, or for ``backends``
    itself)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "backends" and len(parts) > 1 else None


def test_backends_roles_point_down(graph):
    """The compiler never imports a runtime, a runtime never imports the compiler, the
    files floor imports no other role, and nothing imports upward."""
    bad = [f"{a} ({role(a)}, floor {ROLES[role(a)]}) imports {b} ({role(b)}, floor "
           f"{ROLES[role(b)]}) ({w})" for a, b, w in graph.edges(data="where")
           if role(a) and role(b) and role(a) != role(b) and ROLES[role(a)] <= ROLES[role(b)]]
    assert not bad, "backends roles importing sideways or up:\n" + "\n".join(bad)


def test_every_backends_module_has_a_role(graph):
    loose = [m for m in graph.nodes if package(m) == "backends" and m != "backends"
             and role(m) not in ROLES]
    assert not loose, f"backends modules outside {sorted(ROLES)}: {loose}"


def test_every_package_is_on_a_floor():
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert tops <= set(FLOORS) | {"tests", "benchmarks", "examples", "scripts"}, tops - set(FLOORS)


# ---- the graph builder itself -------------------------------------------------------------

def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_builder_sees_imports_inside_functions(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg.high import g\n    return g\n",
        "pkg/high.py": "from pkg import low\n\ndef g():\n    return low\n",
    })
    g = import_graph(tmp_path, ["pkg"])
    assert g.edges["pkg.low", "pkg.high"]["where"] == "pkg/low.py:2"
    assert g.has_edge("pkg.high", "pkg.low")        # `from pkg import low` is the submodule
    [cycle] = cycles(g)
    assert sorted(cycle.splitlines()) == ["  pkg.high imports pkg.low (pkg/high.py:1)",
                                          "  pkg.low imports pkg.high (pkg/low.py:2)"]


def test_builder_resolves_relative_and_attribute_imports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from .sub import thing\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/thing.py": "import pkg.other.name\nfrom ..other import Name\n",
        "pkg/other.py": "",
        "top/__init__.py": "",
        "top/cli.py": "",
    })
    g = import_graph(tmp_path, ["pkg", "top"])
    assert set(g.edges) == {("pkg", "pkg.sub.thing"), ("pkg.sub.thing", "pkg.other")}
