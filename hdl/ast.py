"""The typed syntax tree of a deltachip source file.

Takes: nothing (data definitions). Gives: one frozen dataclass per construct of
docs/language.md; :mod:`hdl.parser` builds them and :mod:`hdl.elaborate` reads them. Every
node carries ``loc``, the :class:`hdl.ir.Loc` of its first character (for operators: of the
operator itself, so a caret points at the ``+`` that failed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from common.kinds import MemKind
from hdl.ir import Loc

# ---- expressions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    """An integer literal. ``width`` is set for sized literals (``8'hFF``), else None."""
    loc: Loc
    value: int
    width: int | None = None
    text: str = ""


@dataclass(frozen=True)
class Name:
    loc: Loc
    name: str


@dataclass(frozen=True)
class Unary:
    """``-a``, ``~a``, ``!a``."""
    loc: Loc
    op: str
    operand: "Expr"


@dataclass(frozen=True)
class Binary:
    """``a OP b``; ``loc`` is the operator's location."""
    loc: Loc
    op: str
    left: "Expr"
    right: "Expr"


@dataclass(frozen=True)
class Ternary:
    """``cond ? if_true : if_false``; ``loc`` is the ``?``."""
    loc: Loc
    cond: "Expr"
    if_true: "Expr"
    if_false: "Expr"


@dataclass(frozen=True)
class Index:
    """``base[index]``: a bit of a value, or a memory read."""
    loc: Loc
    base: "Expr"
    index: "Expr"


@dataclass(frozen=True)
class Slice:
    """``base[hi:lo]`` (inclusive)."""
    loc: Loc
    base: "Expr"
    hi: "Expr"
    lo: "Expr"


@dataclass(frozen=True)
class Member:
    """``base.name``: enum member, instance port, token field, ``tok.kind``."""
    loc: Loc
    base: "Expr"
    name: str
    name_loc: Loc


@dataclass(frozen=True)
class Concat:
    """``{a, b, c}``: ``a`` in the high bits."""
    loc: Loc
    parts: tuple["Expr", ...]


@dataclass(frozen=True)
class Replicate:
    """``{count{value}}``."""
    loc: Loc
    count: "Expr"
    value: "Expr"


@dataclass(frozen=True)
class NamedArg:
    """``name: value`` in a call, an instance, a token constructor or parameters."""
    loc: Loc
    name: str
    value: "Expr"


@dataclass(frozen=True)
class Call:
    """``name #(params)(args)``: a builtin, a module call or a token constructor.
    ``args`` holds expressions (positional) and :class:`NamedArg` (named)."""
    loc: Loc
    name: str
    params: tuple[NamedArg, ...]
    args: tuple[Union["Expr", NamedArg], ...]
    has_params: bool = False


Expr = Union[Number, Name, Unary, Binary, Ternary, Index, Slice, Member, Concat, Replicate, Call]

# ---- types ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypeRef:
    """``u8``, ``s32``, ``bool``, ``u[W]``, ``s[W]`` or an enum name."""
    loc: Loc
    name: str
    width: Expr | None = None

# ---- statements ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    loc: Loc
    stmts: tuple["Stmt", ...]


@dataclass(frozen=True)
class Wire:
    loc: Loc
    name: str
    type: TypeRef
    value: Expr | None


@dataclass(frozen=True)
class Let:
    loc: Loc
    name: str
    type: TypeRef | None
    value: Expr


@dataclass(frozen=True)
class Var:
    loc: Loc
    name: str
    type: TypeRef
    value: Expr | None


@dataclass(frozen=True)
class Assign:
    """``target = value;``, ``target[hi] = value;``, ``target[hi:lo] = value;``.
    ``hi``/``lo`` are None for a whole assignment; ``lo`` is None for a bit."""
    loc: Loc
    target: str
    target_loc: Loc
    value: Expr
    hi: Expr | None = None
    lo: Expr | None = None


@dataclass(frozen=True)
class MemWrite:
    """``memory[addr] <= data;``."""
    loc: Loc
    memory: str
    addr: Expr
    data: Expr


@dataclass(frozen=True)
class If:
    loc: Loc
    cond: Expr
    then: Block
    orelse: Union[Block, "If", None]


@dataclass(frozen=True)
class Pattern:
    """A match pattern: ``kind`` is "wild" (``_``), "name" (a constant, enum member written
    bare, or token kind), "member" (``Enum.MEMBER``) or "expr" (a constant expression)."""
    loc: Loc
    kind: str
    expr: Expr | None = None


@dataclass(frozen=True)
class MatchArm:
    loc: Loc
    patterns: tuple[Pattern, ...]
    body: Block


@dataclass(frozen=True)
class Match:
    loc: Loc
    subject: Expr
    arms: tuple[MatchArm, ...]


@dataclass(frozen=True)
class For:
    """``for var in start..stop { body }`` (stop exclusive)."""
    loc: Loc
    var: str
    start: Expr
    stop: Expr
    body: Block


@dataclass(frozen=True)
class Const:
    loc: Loc
    name: str
    value: Expr


@dataclass(frozen=True)
class Inst:
    """``inst name = module #(params)(connections);``."""
    loc: Loc
    name: str
    module: str
    module_loc: Loc
    params: tuple[NamedArg, ...]
    args: tuple[Union[Expr, NamedArg], ...]


@dataclass(frozen=True)
class FieldDecl:
    loc: Loc
    name: str
    type: TypeRef
    bound: Expr | None = None


@dataclass(frozen=True)
class TokenDecl:
    loc: Loc
    name: str
    fields: tuple[FieldDecl, ...]
    halt: bool


@dataclass(frozen=True)
class StartDecl:
    loc: Loc
    kind: str
    args: tuple[Union[Expr, NamedArg], ...]


@dataclass(frozen=True)
class MemDecl:
    """``rom|ram name: elem[depth] [= "image"] [transparent | table];`` where ``elem`` is a
    TypeRef; ``transparent_loc`` and ``table_loc`` are where ``transparent`` or ``table`` is
    written (None when it is not)."""
    loc: Loc
    kind: MemKind
    name: str
    elem: TypeRef
    depth: Expr
    image: str | None
    image_loc: Loc | None = None
    transparent_loc: Loc | None = None
    table_loc: Loc | None = None


Stmt = Union[Block, Wire, Let, Var, Assign, MemWrite, If, Match, For, Const, Inst, TokenDecl,
             StartDecl, MemDecl]

# ---- top level -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """``import name;`` (``is_path`` False) or ``import "path";`` (True)."""
    loc: Loc
    target: str
    is_path: bool


@dataclass(frozen=True)
class EnumMember:
    loc: Loc
    name: str
    value: Expr | None


@dataclass(frozen=True)
class EnumDecl:
    loc: Loc
    name: str
    members: tuple[EnumMember, ...]


@dataclass(frozen=True)
class ParamDecl:
    loc: Loc
    name: str
    type: str
    default: Expr | None


@dataclass(frozen=True)
class Port:
    loc: Loc
    direction: str   # "in" | "out"
    name: str
    type: TypeRef


@dataclass(frozen=True)
class ModuleDecl:
    loc: Loc
    name: str
    params: tuple[ParamDecl, ...]
    ports: tuple[Port, ...]
    body: Block


@dataclass(frozen=True)
class CircuitDecl:
    loc: Loc
    name: str
    body: Block


Item = Union[Import, Const, EnumDecl, ModuleDecl, CircuitDecl]


@dataclass(frozen=True)
class SourceFile:
    """A parsed file: ``path`` as given (used in every Loc), its text and its items."""
    path: str
    text: str
    items: tuple[Item, ...]
