"""Compile diagnostics: located messages, collected and rendered together.

Takes: :class:`hdl.ir.Loc` locations, messages and the source texts. Gives:
:class:`Diagnostic` (one message), :class:`Collector` (what a compile stage appends to),
:class:`CompileError` (raised once at the end of a stage with every diagnostic) and
:func:`render`, which prints each as::

    FILE:LINE:COL: error: MESSAGE
    <the source line>
    <spaces>^
    FILE:LINE:COL: note: NOTE
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from common.errors import UserError
from hdl.ir import Loc


@dataclass(frozen=True)
class Diagnostic:
    """One message at ``loc``; ``notes`` are (location, text) pairs printed after it."""
    loc: Loc
    message: str
    notes: list[tuple[Loc, str]] = field(default_factory=list)
    severity: str = "error"


def _source_lines(loc: Loc, sources: Mapping[str, str]) -> list[str]:
    text = sources.get(loc.file)
    if text is None or loc.line < 1:
        return []
    lines = text.splitlines()
    if loc.line > len(lines):
        return []
    line = lines[loc.line - 1]
    # keep tabs under tabs so the caret lines up in a terminal
    pad = "".join("\t" if ch == "\t" else " " for ch in line[: max(0, loc.col - 1)])
    return [line, pad + "^"]


def render_one(diag: Diagnostic, sources: Mapping[str, str]) -> str:
    """The text of one diagnostic (no trailing newline)."""
    where = str(diag.loc) if diag.loc.line > 0 else diag.loc.file   # whole-file messages
    out = [f"{where}: {diag.severity}: {diag.message}"]
    out += _source_lines(diag.loc, sources)
    out += [f"{nloc}: note: {text}" for nloc, text in diag.notes]
    return "\n".join(out)


def render(diags: Iterable[Diagnostic], sources: Mapping[str, str]) -> str:
    """All diagnostics, in the order given, one block each (no trailing newline)."""
    return "\n".join(render_one(d, sources) for d in diags)


def suggest(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)``-style suffix for an unknown ``name``, or ``""``."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


TOO_DEEP = "the source nests expressions or blocks too deeply to compile"


def too_deep(filename: str) -> "CompileError":
    """The error for a source nested past Python's recursion limit (whole-file message)."""
    return CompileError([Diagnostic(Loc(filename, 0, 0), TOO_DEEP)])


class CompileError(UserError):
    """Bad source: every diagnostic of one compile. ``str()`` renders them all."""

    def __init__(self, diagnostics: list[Diagnostic], sources: Mapping[str, str] | None = None):
        self.diagnostics = list(diagnostics)
        self.sources = dict(sources or {})
        super().__init__(render(self.diagnostics, self.sources))

    def __str__(self) -> str:
        return render(self.diagnostics, self.sources)


class Collector:
    """Diagnostics of one compile, in the order found, without exact duplicates."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self._seen: set[tuple[Loc, str]] = set()

    def error(self, loc: Loc, message: str, notes: list[tuple[Loc, str]] | None = None) -> None:
        key = (loc, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.diagnostics.append(Diagnostic(loc, message, list(notes or [])))

    def __bool__(self) -> bool:
        return any(d.severity == "error" for d in self.diagnostics)

    def raise_if_errors(self, sources: Mapping[str, str]) -> None:
        if self:
            diags = sorted(self.diagnostics, key=lambda d: (d.loc.file, d.loc.line, d.loc.col))
            raise CompileError(diags, sources)
