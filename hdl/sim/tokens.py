"""Token text: ``Kind field=value ...`` as ``deltachip sim`` prints and ``--start`` reads it.

Takes/gives: :class:`hdl.ir.Token` values of a circuit. Fields print in declaration order,
unsigned decimal, signed fields signed (two's complement read back), enum fields by member
name (a value that is no member prints as a number). :func:`parse_token` accepts decimal,
``0x``/``0b``/``0o`` and ``_`` separators, negative values for signed fields, ``MEMBER`` or
``Enum.MEMBER`` for enum fields, and requires every field exactly once (in any order).
"""
from __future__ import annotations

from common.errors import UserError
from hdl.ir import Circuit, Field, Token


class TokenSyntaxError(UserError):
    """A token text (``--start``) that does not name a kind and its fields correctly."""


def _signed(value: int, width: int) -> int:
    return value - (1 << width) if value >> (width - 1) & 1 else value


def format_token(circuit: Circuit, tok: Token) -> str:
    """``Kind f=1 g=-2`` for ``tok`` (signed fields shown signed)."""
    kind = circuit.kinds[tok.kind]
    parts = [kind.name]
    for f, v in zip(kind.fields, tok.fields):
        member = next((m for m, mv in f.enum[1] if mv == v), None) if f.enum else None
        parts.append(f"{f.name}={member or (_signed(v, f.width) if f.signed else v)}")
    return " ".join(parts)


def _field_desc(circuit: Circuit, k: int) -> str:
    kind = circuit.kinds[k]
    fields = ", ".join(f"{f.name}: {f.enum[0] if f.enum else ('s' if f.signed else 'u') + str(f.width)}"
                       for f in kind.fields)
    return f"{kind.name}({fields})"


def _enum_value(f: Field, text: str) -> int:
    """The value of enum field ``f`` written as ``MEMBER`` or ``Enum.MEMBER``."""
    assert f.enum is not None
    enum, members = f.enum
    name = text.removeprefix(f"{enum}.")
    for member, value in members:
        if member == name:
            return value
    raise TokenSyntaxError(f"field {f.name}: '{text}' is not a member of enum {enum} "
                           f"({', '.join(m for m, _ in members)})")


def parse_token(circuit: Circuit, text: str) -> Token:
    """Parse ``'Kind f=1 g=2'`` into a Token of ``circuit``; raise TokenSyntaxError."""
    words = text.split()
    if not words:
        raise TokenSyntaxError("empty token text: expected 'Kind field=value ...'")
    names = [k.name for k in circuit.kinds]
    if words[0] not in names:
        raise TokenSyntaxError(f"unknown token kind '{words[0]}' in '{text}' "
                               f"(kinds: {', '.join(names)})")
    k = names.index(words[0])
    kind = circuit.kinds[k]
    fields = {f.name: f for f in kind.fields}
    given: dict[str, int] = {}
    for w in words[1:]:
        name, eq, val = w.partition("=")
        if not eq or not name or not val:
            raise TokenSyntaxError(f"expected field=value, got '{w}' in '{text}' "
                                   f"(token {_field_desc(circuit, k)})")
        if name not in fields:
            raise TokenSyntaxError(f"token {kind.name} has no field '{name}' "
                                   f"(token {_field_desc(circuit, k)})")
        if name in given:
            raise TokenSyntaxError(f"field '{name}' given twice in '{text}'")
        f = fields[name]
        if f.enum:
            given[name] = _enum_value(f, val)
            continue
        try:
            v = int(val, 0)
        except ValueError:
            raise TokenSyntaxError(f"field {name}: '{val}' is not an integer") from None
        lo, hi = (-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed \
            else (0, (1 << f.width) - 1)
        if not lo <= v <= hi:
            raise TokenSyntaxError(f"field {name} = {v} is out of range for "
                                   f"{'s' if f.signed else 'u'}{f.width} ({lo}..{hi})")
        given[name] = v & ((1 << f.width) - 1)
    missing = [f.name for f in kind.fields if f.name not in given]
    if missing:
        raise TokenSyntaxError(f"token {kind.name} is missing field{'s' * (len(missing) > 1)} "
                               f"{', '.join(missing)} (token {_field_desc(circuit, k)})")
    return Token(k, tuple(given[f.name] for f in kind.fields))
