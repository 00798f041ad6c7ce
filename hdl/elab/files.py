"""Source files and imports: parse each file once, resolve ``import`` statements, build each
file's global scope (its own const/enum/module/circuit names plus those of its imports).

Takes: a path (or text) of the root file. Gives: :class:`FileCtx` per file, the source texts
(for rendering diagnostics) and, through the shared collector, located errors for syntax
errors, imports not found and import cycles.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import stdlib
from common.inputs import InputTooLarge, read_bounded
from hdl import ast
from hdl.diagnostics import Collector, CompileError
from hdl.elab.values import Scope
from hdl.ir import Loc
from hdl.parser import parse

STDLIB_DIR = Path(stdlib.__file__).parent

#: the largest source file read, in bytes (about 300,000 lines): the front end holds about
#: 170 bytes of memory per source byte (a 100,000-line, 2.7 MB chain of adds: 0.46 GB peak,
#: 25 s), so a source at the limit parses in about 1.5 GB
MAX_SOURCE_BYTES = 8 << 20
SOURCE_LIMIT_WHAT = "a .hdl source (the front end holds about 170 bytes of memory per source byte)"


@dataclass(eq=False)
class FileCtx:
    """One parsed file. ``name`` is the path as shown in locations; ``dir`` its folder
    (relative paths in it resolve from there); ``scope`` its global names once built."""
    name: str
    dir: Path
    source: ast.SourceFile
    imports: list[tuple["FileCtx", Loc]] = field(default_factory=list)   # (file, import stmt)
    scope: Scope = field(default_factory=Scope)
    globals_done: bool = False


def source_texts(files: Iterable[str]) -> dict[str, str]:
    """The text of each source file in ``files`` that can still be read (bounded by
    :data:`MAX_SOURCE_BYTES`, UTF-8), for rendering diagnostics after elaboration; the
    others (``<string>``, a file since removed or changed) are left out."""
    out: dict[str, str] = {}
    for f in dict.fromkeys(files):
        try:
            out[f] = read_bounded(f, MAX_SOURCE_BYTES, SOURCE_LIMIT_WHAT).decode("utf-8-sig")
        except (OSError, UnicodeDecodeError, InputTooLarge):
            pass
    return out


class Loader:
    """Parses files and their imports, each once. Errors go to ``diags``."""

    def __init__(self, diags: Collector):
        self.diags = diags
        self.sources: dict[str, str] = {}
        self.files: dict[Path, FileCtx | None] = {}   # resolved path -> file (None: failed)
        self._stack: list[Path] = []

    def _parse(self, text: str, name: str) -> ast.SourceFile | None:
        self.sources[name] = text
        try:
            return parse(text, name)
        except CompileError as e:
            for d in e.diagnostics:
                self.diags.error(d.loc, d.message, d.notes)
            return None

    def load_text(self, text: str, name: str, folder: Path) -> FileCtx | None:
        if len(text.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
            too = InputTooLarge(name, MAX_SOURCE_BYTES, SOURCE_LIMIT_WHAT)
            self.diags.error(Loc(name, 0, 0), f"the source text {too.problem}")
            return None
        src = self._parse(text, name)
        if src is None:
            return None
        ctx = FileCtx(name, folder, src)
        self._resolve_imports(ctx)
        return ctx

    def load_path(self, path: Path, shown: str | None = None,
                  imported_at: Loc | None = None) -> FileCtx | None:
        """Parse ``path`` (once) and its imports; ``imported_at`` locates a read error of an
        imported file at its ``import`` statement."""
        key = resolved(path)
        if key in self.files:
            return self.files[key]
        try:   # UTF-8; a leading BOM is dropped
            text = read_bounded(path, MAX_SOURCE_BYTES, SOURCE_LIMIT_WHAT).decode("utf-8-sig")
        except (OSError, UnicodeDecodeError, InputTooLarge) as e:
            name = shown or str(path)
            if isinstance(e, InputTooLarge):
                message = (f"'{name}' {e.problem}" if imported_at is not None
                           else f"this file {e.problem}")
            else:
                why = e.strerror if isinstance(e, OSError) and e.strerror else "not a UTF-8 text file"
                message = (f"cannot read '{name}' to import: {why}" if imported_at is not None
                           else f"cannot read source file: {why}")
            self.diags.error(imported_at or Loc(name, 0, 0), message)
            self.files[key] = None
            return None
        self._stack.append(key)
        src = self._parse(text, shown or str(path))
        ctx = FileCtx(shown or str(path), path.parent, src) if src is not None else None
        self.files[key] = ctx
        if ctx is not None:
            self._resolve_imports(ctx)
        self._stack.pop()
        return ctx

    def _find(self, imp: ast.Import, folder: Path) -> Path | None:
        """The file ``imp`` names: one that exists, whatever it is (a directory, a device or
        a FIFO there is read, and refused as what it is, not reported missing)."""
        if imp.is_path:
            p = folder / imp.target
            return p if p.exists() else None
        for base in (folder, STDLIB_DIR):
            p = base / f"{imp.target}.hdl"
            if p.exists():
                return p
        return None

    def _resolve_imports(self, ctx: FileCtx) -> None:
        for item in ctx.source.items:
            if not isinstance(item, ast.Import):
                continue
            path = self._find(item, ctx.dir)
            if path is None:
                shown = item.target if item.is_path else f"{item.target}.hdl"
                where = ("relative to the importing file" if item.is_path
                         else "in the importing file's folder or in stdlib/")
                self.diags.error(item.loc, f"cannot find '{shown}' to import (looked {where})")
                continue
            key = resolved(path)
            if key in self._stack:
                chain = self._stack[self._stack.index(key):] + [key]
                text = " -> ".join(p.name for p in chain)
                self.diags.error(item.loc, f"import cycle: {text}")
                continue
            shown = _display(path)
            sub = self.load_path(path, shown, item.loc)
            if sub is not None:
                ctx.imports.append((sub, item.loc))


def resolved(path: Path) -> Path:
    """``path`` made absolute, its links followed as far as they go: a symbolic link loop
    (which ``Path.resolve`` raises RuntimeError for) or an unreadable folder stays as it
    is, for the read that follows to report ("Too many levels of symbolic links")."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _display(path: Path) -> str:
    """How an imported file is named in locations: relative to the working folder when it
    lies under it, else ``stdlib/NAME`` for the standard library, else the absolute path."""
    rp = resolved(path)
    try:
        return str(rp.relative_to(Path.cwd().resolve()))
    except ValueError:
        pass
    try:
        return "stdlib/" + str(rp.relative_to(STDLIB_DIR.resolve()))
    except ValueError:
        return str(rp)

