"""The language front end's public API: source file -> elaborated IR.

Takes: a ``.hdl`` path (or source text) and the name of a circuit or module. Gives: an
:class:`hdl.ir.Circuit` that passes :meth:`hdl.ir.Circuit.check`, or raises
:class:`hdl.diagnostics.CompileError` (a :class:`common.errors.UserError`) listing every
error with file:line:col, the source line and a caret. Imports are searched in the importing
file's folder, then in ``stdlib/``.
"""
from __future__ import annotations

from pathlib import Path

from hdl.elaborate import _guard_depth, _load, elaborate_circuit, elaborate_module, list_circuits
from hdl.ir import Circuit


def load_circuit(path: str | Path, top: str | None = None) -> Circuit:
    """Parse ``path`` and its imports and elaborate the circuit ``top`` (or the only one)."""
    return elaborate_circuit(Path(path), top, filename=str(path))


def load_module(path: str | Path, name: str, params: dict[str, int] | None = None) -> Circuit:
    """Elaborate module ``name`` alone (with ``params`` overriding its defaults): the IR has
    an INPUT node per input, an OUTPUT node per output, and ``Circuit.ports`` in order."""
    return elaborate_module(Path(path), name, params, filename=str(path))


def load_source(text: str, filename: str = "<string>", top: str | None = None) -> Circuit:
    """Like :func:`load_circuit` for source text; ``filename`` names it in messages and
    locates its relative imports and ROM images."""
    return elaborate_circuit(None, top, text=text, filename=filename)


def load_module_source(text: str, name: str, params: dict[str, int] | None = None,
                       filename: str = "<string>") -> Circuit:
    """Like :func:`load_module` for source text."""
    return elaborate_module(None, name, params, text=text, filename=filename)


@_guard_depth
def list_tops(path: str | Path) -> list[str]:
    """Names of the circuits declared in ``path`` itself (not in its imports)."""
    diags, loader, root = _load(Path(path), None, str(path))
    if root is None:
        diags.raise_if_errors(loader.sources)
        return []
    names = list_circuits(root, diags)
    diags.raise_if_errors(loader.sources)
    return names
