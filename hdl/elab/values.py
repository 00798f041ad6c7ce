"""Values and symbols the elaborator works with.

Takes: nothing (data definitions). Gives: :class:`Type` (a signal's width, signedness and
enum), the expression results :class:`Sig` (a node), :class:`CInt` (a compile-time integer
without a width) and :data:`POISON` (an error was already reported), and the symbols a name
can stand for in a scope.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from hdl import ast
from hdl.ir import Loc, Memory, TokenKind

KIND_ENUM = "<token kind>"


@dataclass(frozen=True)
class Type:
    """A signal type. ``enum`` names an enum (or :data:`KIND_ENUM` for ``tok.kind``)."""
    width: int
    signed: bool = False
    enum: str | None = None

    def __str__(self) -> str:
        if self.enum == KIND_ENUM:
            return "token kind"
        if self.enum:
            return f"enum {self.enum}"
        return f"{'s' if self.signed else 'u'}{self.width}"

    def fits(self, v: int) -> bool:
        if self.signed:
            return -(1 << (self.width - 1)) <= v < (1 << (self.width - 1))
        return 0 <= v < (1 << self.width)

    def range_text(self) -> str:
        if self.signed:
            return f"{-(1 << (self.width - 1))}..{(1 << (self.width - 1)) - 1}"
        return f"0..{(1 << self.width) - 1}"


@dataclass(frozen=True)
class Sig:
    node: int
    type: Type


@dataclass(frozen=True)
class CInt:
    value: int


class _Poison:
    def __repr__(self) -> str:
        return "POISON"


POISON = _Poison()
Val = Union[Sig, CInt, _Poison]


# ---- symbols ------------------------------------------------------------------------------

@dataclass(eq=False)
class ConstSym:
    value: int
    loc: Loc


@dataclass(eq=False)
class SigSym:
    """A fixed named signal: ``let``, a module input."""
    sig: Sig
    loc: Loc


@dataclass(eq=False)
class VarSym:
    """A ``var``: its current value lives in the path state under ``self``."""
    name: str
    type: Type
    loc: Loc
    hier: str


@dataclass(eq=False)
class WireSym:
    """A ``wire`` or a module ``out`` port: reads see ``alias``; its driver lives in the
    path state under ``self`` until the declaring block ends."""
    name: str
    type: Type
    alias: int
    loc: Loc
    what: str = "signal"   # "signal" | "output"


@dataclass(eq=False)
class NextSym:
    loc: Loc


@dataclass(eq=False)
class TokSym:
    loc: Loc


@dataclass(eq=False)
class KindSym:
    index: int
    kind: TokenKind
    field_types: list[Type]
    loc: Loc


@dataclass(eq=False)
class MemSym:
    memory: Memory
    type: Type


@dataclass(eq=False)
class EnumSym:
    name: str
    members: dict[str, int]
    type: Type
    loc: Loc


@dataclass(eq=False)
class ModuleSym:
    decl: ast.ModuleDecl
    file: Any   # elaborate.FileCtx


@dataclass(eq=False)
class CircuitSym:
    decl: ast.CircuitDecl
    file: Any


@dataclass(eq=False)
class InstSym:
    """An instance: its outputs as signals, by port name."""
    name: str
    module: str
    outputs: dict[str, Sig]
    loc: Loc


Symbol = Union[ConstSym, SigSym, VarSym, WireSym, NextSym, TokSym, KindSym, MemSym, EnumSym,
               ModuleSym, CircuitSym, InstSym]


class Scope:
    """Names visible at one level; ``parent`` is the enclosing scope (None at the top)."""

    def __init__(self, parent: "Scope | None" = None):
        self.parent = parent
        self.syms: dict[str, Any] = {}
        self.locs: dict[str, Loc] = {}

    def lookup(self, name: str) -> Any:
        s: Scope | None = self
        while s is not None:
            if name in s.syms:
                return s.syms[name]
            s = s.parent
        return None

    def names(self) -> set[str]:
        out: set[str] = set()
        s: Scope | None = self
        while s is not None:
            out |= set(s.syms)
            s = s.parent
        return out


@dataclass
class Assigned:
    """A var's value, a wire's driver or the next token on one path. ``value`` is a node id
    (or a tuple of node ids for the next token); ``complete`` is False when only some of
    the paths that merged here assigned it; ``loc`` the (first) assignment."""
    value: Any
    loc: Loc
    complete: bool = True


@dataclass
class PendingWrite:
    """A memory's write port on the current path: address, data and enable nodes."""
    addr: int
    data: int
    enable: int
    loc: Loc


@dataclass
class State:
    """What the statements on the current path have assigned so far."""
    vals: dict[Any, Assigned] = field(default_factory=dict)
    writes: dict[str, PendingWrite] = field(default_factory=dict)

    def copy(self) -> "State":
        return State(dict(self.vals), dict(self.writes))
