"""The schema of chip.json, and a small checker that names the first field that breaks it.

Takes: the parsed chip.json (any JSON value). Gives: nothing, or raises
:class:`SchemaError` whose ``where`` is the field's path (``memories.stack.banks[0]``) and
whose text says what the field must be and what it is (``must be an integer, got "2"``).
:func:`backends.chipdir.checkpoint.load_chip_json` runs it before anything reads the file, so a
hand-edited or damaged chip.json is a one-line error, never a traceback.

The spec is built from a few combinators: :data:`INT` (a JSON integer, not a boolean),
:data:`NUM`, :data:`STR`, :data:`BOOL`, :class:`OneOf` (constants), :class:`Maybe` (or
null), :class:`ListOf`, :class:`Tup` (a fixed-length array), :class:`MapOf` (an object of
string keys) and :class:`Obj` (named keys, some optional; unknown keys are allowed, so a
newer deltachip may add fields).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class SchemaError(Exception):
    """``where`` (a field path, '' for the whole file) must be ``what``, but is not."""

    def __init__(self, where: str, what: str, got: Any, missing: bool = False):
        self.where, self.what = where, what
        name = f"field {where!r}" if where else "the file"
        if missing:
            super().__init__(f"{name} is missing (it must be {what})")
            return
        shown = json.dumps(got)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        super().__init__(f"{name} must be {what}, got {shown}")


class Spec:
    """A JSON shape: ``check(value, where)`` raises SchemaError unless ``value`` has it;
    ``what`` says the shape in words."""

    def check(self, value: Any, where: str) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Atom(Spec):
    what: str
    types: tuple[type, ...]
    minimum: int | None = None

    def check(self, value: Any, where: str) -> None:
        if isinstance(value, bool) and bool not in self.types or not isinstance(value, self.types):
            raise SchemaError(where, self.what, value)
        if self.minimum is not None and value < self.minimum:
            raise SchemaError(where, self.what, value)


INT = Atom("an integer", (int,))
NAT = Atom("an integer >= 0", (int,), 0)
NUM = Atom("a number", (int, float))
STR = Atom("a string", (str,))
BOOL = Atom("true or false", (bool,))


@dataclass(frozen=True)
class OneOf(Spec):
    values: tuple[Any, ...]

    @property
    def what(self) -> str:
        return "one of " + ", ".join(json.dumps(v) for v in self.values)

    def check(self, value: Any, where: str) -> None:
        if not any(value == v and type(value) is type(v) for v in self.values):
            raise SchemaError(where, self.what, value)


@dataclass(frozen=True)
class Maybe(Spec):
    inner: Spec

    @property
    def what(self) -> str:
        return f"{self.inner.what} or null"

    def check(self, value: Any, where: str) -> None:
        if value is not None:
            try:
                self.inner.check(value, where)
            except SchemaError as e:
                if e.where != where:
                    raise
                raise SchemaError(where, self.what, value) from None


@dataclass(frozen=True)
class ListOf(Spec):
    item: Spec

    @property
    def what(self) -> str:
        return "an array"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise SchemaError(where, self.what, value)
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")


@dataclass(frozen=True)
class Tup(Spec):
    items: tuple[Spec, ...]
    optional: int = 0           # how many of the last items may be left off

    @property
    def what(self) -> str:
        n = len(self.items)
        return f"an array of {n - self.optional} to {n} items" if self.optional else \
            f"an array of {n} items"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, list) or \
                not len(self.items) - self.optional <= len(value) <= len(self.items):
            raise SchemaError(where, self.what, value)
        for i, (s, v) in enumerate(zip(self.items, value)):
            s.check(v, f"{where}[{i}]")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


@dataclass(frozen=True)
class MapOf(Spec):
    item: Spec
    what: str = "an object"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise SchemaError(where, self.what, value)
        for k, v in value.items():
            self.item.check(v, _join(where, k))


@dataclass(frozen=True)
class Obj(Spec):
    fields: dict[str, Spec]
    optional: frozenset[str] = field(default_factory=frozenset)
    what: str = "an object"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise SchemaError(where, self.what, value)
        for k, spec in self.fields.items():
            if k not in value:
                if k in self.optional:
                    continue
                raise SchemaError(_join(where, k), spec.what, None, missing=True)
            spec.check(value[k], _join(where, k))


ANY = Obj({})                                   # any object
LOC = Tup((STR, INT, INT))
ENUM = Maybe(Tup((STR, ListOf(Tup((STR, INT))))))
FIELD = Tup((STR, NAT, BOOL, ENUM, NAT), 1)      # name, width, signed, enum[, bound] (kinds)

CIRCUIT = Obj({
    "name": STR, "loc": LOC,
    "nodes": ListOf(Tup((STR, NAT, ListOf(NAT), Atom("any value", (object,)),
                         Tup((NAT, INT, INT)), Maybe(STR)))),
    "files": ListOf(STR),
    "memories": ListOf(Obj({"name": STR, "kind": OneOf(("rom", "ram")), "width": NAT,
                            "depth": NAT, "loc": LOC, "image": Maybe(STR),
                            "read_under_write": OneOf(("old", "new")), "table": BOOL},
                           optional=frozenset({"read_under_write", "table"}))),
    "kinds": ListOf(Obj({"name": STR, "loc": LOC, "halt": BOOL, "fields": ListOf(FIELD)})),
    "start": Maybe(Tup((NAT, ListOf(INT)))),
    "names": MapOf(NAT),
    "instances": ListOf(Tup((STR, STR, Tup((NAT, INT, INT)), INT))),   # path, module, loc, parent
    "inst_of": ListOf(INT),                                           # per node; -1: the top
}, optional=frozenset({"instances", "inst_of"}))

MEMORY = Obj({"kind": OneOf(("rom", "ram")), "width": NAT, "depth": NAT, "layer": NAT,
              "rows_per_bank": NAT, "rowblocks": NAT, "slices": NAT, "pack": NAT,
              "banks": ListOf(Tup((NAT, NAT))), "read_ports": NAT, "pair": BOOL,
              "transparent": BOOL, "vsel": NAT},
             optional=frozenset({"last_layer", "key_heads", "write_ports", "pair",
                                 "transparent", "vsel"}))

MARGIN = Obj({"cell_bits": NAT, "cell_max": NAT, "margin_bits": INT})

#: what backends.compile.exact proved (Proof.record); absent in a chip.json written before it was kept
PROOF = Obj({"max_lane": NAT, "max_pre": INT, "min_pre": INT, "neurons": NAT,
             "max_weight_bits": NAT, "max_gate_l1": NAT, "max_down_l1": NAT, "need_bits": NAT,
             "ballast_bits": INT, "mean_square_bits": INT, "rms_eps": NUM,
             "memories": MapOf(MARGIN), "prefill": BOOL}, optional=frozenset({"prefill"}))

CHIP = Obj({
    "format": STR,
    "format_version": INT,
    "dtype": OneOf(("bf16", "fp32")),
    "target": Obj({"name": STR, "d_k": NAT, "d_v": NAT, "v_per_k": NAT, "k_heads": Maybe(NAT),
                   "mlp_width": Maybe(NAT), "conv_kernel": NAT, "min_hidden": NAT,
                   "base_hidden": NAT, "rms_eps": NUM}),
    "numerics": MapOf(INT),
    "tokens": Obj({"vocab": NAT, "kinds": ListOf(Obj({"name": STR, "offset": NAT,
                                                       "payload_bits": NAT, "halt": BOOL,
                                                       "ids": NAT}, optional=frozenset({"ids"})))}),
    "layers": ListOf(Obj({"neurons": NAT, "key_heads": NAT, "memories": ListOf(STR),
                          "nonzero_weights": NAT})),
    "memories": MapOf(MEMORY),
    "circuit": CIRCUIT,
    "roms": MapOf(ListOf(INT)),
    "config": ANY,
    "proof": PROOF,
}, optional=frozenset({"layers", "proof"}))


def kind_ids(kind: dict[str, Any]) -> int:
    """How many ids a token kind of chip.json's ``tokens.kinds`` owns (its ``ids``; a chip
    written before bounded fields: 2**payload_bits)."""
    return int(kind.get("ids", 1 << kind["payload_bits"]))


def check_chip(chip: Any) -> None:
    """SchemaError naming the first field of ``chip`` (parsed chip.json) that breaks
    :data:`CHIP`; ``format`` and ``format_version`` are checked first, so a file of another
    format or version is reported as such by the caller rather than field by field."""
    CHIP.check(chip, "")
