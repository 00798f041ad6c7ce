"""The IR as JSON, so that a compiled directory carries its own circuit.

Takes / gives: :class:`hdl.ir.Circuit` <-> a JSON-able dict (``circuit_to_json`` /
``circuit_from_json``). Memory images are stored apart (``chip.json`` "roms"), not in the
nodes. Round trip is exact: same nodes, params, locations, names, kinds (fields with their enum
types), memories and module instances (``instances``, ``inst_of``: absent in a chip.json
written before they were kept, read as none).
"""
from __future__ import annotations

from typing import Any

from common.kinds import MemKind
from hdl.ir import Circuit, Field, Instance, Loc, Memory, Node, Op, Token, TokenKind


def _loc(loc: Loc) -> list:
    return [loc.file, loc.line, loc.col]


def _field_to_json(f: Field) -> list:
    """``[name, width, signed, enum]`` and, for a bounded field, its bound last; enum is null
    or ``[enum name, [[member, value], ...]]``."""
    enum = None if f.enum is None else [f.enum[0], [list(m) for m in f.enum[1]]]
    return [f.name, f.width, f.signed, enum] + ([] if f.bound is None else [f.bound])


def _field_from_json(d: list) -> Field:
    name, width, signed, enum, *bound = d
    if enum is not None:
        enum = (enum[0], tuple((m, v) for m, v in enum[1]))
    return Field(name, width, signed, enum, bound[0] if bound else None)


def circuit_to_json(c: Circuit) -> dict[str, Any]:
    files: dict[str, int] = {}

    def floc(loc: Loc) -> list:
        i = files.setdefault(loc.file, len(files))
        return [i, loc.line, loc.col]
    nodes = []
    for n in c.nodes:
        param = list(n.param) if isinstance(n.param, tuple) else n.param
        nodes.append([n.op.value, n.width, list(n.args), param, floc(n.loc), n.name])
    instances = [[i.path, i.module, floc(i.loc), i.parent] for i in c.instances]
    return {
        "name": c.name, "loc": _loc(c.loc),
        "nodes": nodes,
        "instances": instances,
        "inst_of": [c.instance_of(n.id) for n in c.nodes] if c.instances else [],
        "files": sorted(files, key=files.get),
        # "table" only where set, so a circuit without table roms serialises as before
        "memories": [{"name": m.name, "kind": m.kind, "width": m.width, "depth": m.depth,
                      "loc": _loc(m.loc), "image": m.image,
                      "read_under_write": m.read_under_write, **({"table": True} if m.table
                                                                 else {})}
                     for m in c.memories.values()],
        "kinds": [{"name": k.name, "loc": _loc(k.loc), "halt": k.halt,
                   "fields": [_field_to_json(f) for f in k.fields]} for k in c.kinds],
        "start": None if c.start is None else [c.start.kind, list(c.start.fields)],
        "names": c.names,
    }


def circuit_from_json(d: dict[str, Any], images: dict[str, list[int]] | None = None) -> Circuit:
    """The circuit; ``images`` gives each memory's ``init`` (default: empty)."""
    files = d["files"]
    images = images or {}
    c = Circuit(d["name"], Loc(*d["loc"]))
    for i, (op, width, args, param, (fi, line, col), name) in enumerate(d["nodes"]):
        op = Op(op)
        if isinstance(param, list):
            param = tuple(param)
        c.nodes.append(Node(i, op, width, tuple(args), param, Loc(files[fi], line, col), name))
    for m in d["memories"]:
        c.memories[m["name"]] = Memory(m["name"], MemKind(m["kind"]), m["width"], m["depth"],
                                       Loc(*m["loc"]), m["image"],
                                       tuple(images.get(m["name"], ())),
                                       m.get("read_under_write", "old"),
                                       bool(m.get("table", False)))
    c.kinds = [TokenKind(k["name"], tuple(_field_from_json(f) for f in k["fields"]), Loc(*k["loc"]),
                         k["halt"]) for k in d["kinds"]]
    if d["start"] is not None:
        c.start = Token(d["start"][0], tuple(d["start"][1]))
    c.names = dict(d["names"])
    c.instances = [Instance(path, module, Loc(files[fi], line, col), parent)
                   for path, module, (fi, line, col), parent in d.get("instances", [])]
    c.inst_of = list(d.get("inst_of", []))
    # an instance sits in an earlier one (so walking up ends), a node in a listed one
    if any(not -1 <= inst.parent < i for i, inst in enumerate(c.instances)) or \
            any(not -1 <= k < len(c.instances) for k in c.inst_of):
        raise ValueError("an instance index out of range")
    return c
