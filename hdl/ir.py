"""The netlist IR: one flat DAG of primitive operations on bit-vectors.

Takes: nothing (this module defines the data structure; ``hdl.elaborate`` builds it and
every later stage reads it). Gives: :class:`Circuit`, :class:`Node`, :class:`Op`,
:class:`Memory`, :class:`TokenKind`, :class:`Loc`, and :func:`Circuit.check` / :func:`Circuit.graph`.

The documentation of every op, with its exact semantics, is ``docs/ir.md``. The rules, in
short: a node's value is an unsigned integer of ``node.width`` bits (1..64); arguments are
node ids that come earlier in ``Circuit.nodes`` (the list is in topological order); sink
nodes (``MEM_WRITE``, ``TOKEN_OUT``) have width 0 and no value.
"""
from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:       # networkx is imported by graph() alone: reading a circuit needs none
    import networkx as nx

from common.kinds import MemKind

MAX_WIDTH = 64


@dataclass(frozen=True)
class Loc:
    """A source location: file path as the user gave it, 1-based line and column."""
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOLOC = Loc("<builtin>", 0, 0)


class Op(str, enum.Enum):
    """The primitive operations. See docs/ir.md for each one's exact semantics."""
    CONST = "const"          # param: int value (0 <= value < 2**width); no args
    TOKEN_KIND = "tok_kind"  # the current token's kind index; no args
    TOKEN_FIELD = "tok_field"  # param: (kind index, field index); value, or 0 if another kind
    AND = "and"              # args (a, b), equal widths
    OR = "or"
    XOR = "xor"
    NOT = "not"              # args (a,)
    ADD = "add"              # args (a, b), equal widths = node width; mod 2**width
    SUB = "sub"
    MUL = "mul"              # low `width` bits of the product; args widths == node width
    EQ = "eq"                # width 1; args equal widths
    ULT = "ult"              # width 1; unsigned a < b
    SLT = "slt"              # width 1; signed (two's complement) a < b
    SHL = "shl"              # args (a, amount): a << amount, 0 if amount >= width
    LSHR = "lshr"            # a >> amount (logical), 0 if amount >= width
    ASHR = "ashr"            # arithmetic shift right, sign fill if amount >= width
    SLICE = "slice"          # param: lo; args (a,): bits lo .. lo+width-1 of a
    CONCAT = "concat"        # args high .. low; width = sum of arg widths
    MUX = "mux"              # args (sel, if0, if1): sel (width 1) ? if1 : if0
    MEM_READ = "mem_read"    # param: memory name; args (addr,), or (addr, *write's args) on a
                             # transparent memory with a write: read-under-write "new"
    MEM_WRITE = "mem_write"  # param: memory name; args (addr, data, enable); sink
    TOKEN_OUT = "tok_out"    # args (kind, *fields of kind 0, *fields of kind 1, ...); sink
    INPUT = "input"          # param: port name; a module's input port (modules only); no args
    OUTPUT = "output"        # param: port name; args (value,); a module's output port; sink


SINKS = frozenset({Op.MEM_WRITE, Op.TOKEN_OUT, Op.OUTPUT})
BINARY_SAME_WIDTH = frozenset({Op.AND, Op.OR, Op.XOR, Op.ADD, Op.SUB, Op.MUL})
COMPARES = frozenset({Op.EQ, Op.ULT, Op.SLT})
SHIFTS = frozenset({Op.SHL, Op.LSHR, Op.ASHR})


@dataclass(frozen=True)
class Node:
    """One IR node. ``id`` is its index in ``Circuit.nodes``; ``name`` the source signal it
    drives (hierarchical, e.g. ``alu.sum``) when it is a named signal, else None."""
    id: int
    op: Op
    width: int
    args: tuple[int, ...] = ()
    param: Any = None
    loc: Loc = NOLOC
    name: str | None = None


@dataclass(frozen=True)
class Memory:
    """A memory: ``kind`` is :class:`common.kinds.MemKind` (``rom`` or ``ram``; the name is
    accepted and converted); ``width`` bits per word, ``depth`` words.
    ``image`` is the default ROM image path (resolved, absolute) or None; ``init`` the
    default contents as a tuple of ints (ROMs with an image; empty = zeros).
    ``read_under_write`` is "old" (a read sees the contents at the start of the step) or, on
    a ``transparent`` RAM, "new": a read sees this step's write (its MEM_READ nodes then
    carry the write's address, data and enable after their own address).
    ``table``: a ROM read only at addresses that depend on the current token alone
    (:meth:`Circuit.token_only`), so each read is a function of the token: the compiler
    folds its words into the token tables (the embedding rows), and it holds no state."""
    name: str
    kind: MemKind
    width: int
    depth: int
    loc: Loc
    image: str | None = None
    init: tuple[int, ...] = ()
    read_under_write: str = "old"
    table: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", MemKind(self.kind))

    @property
    def addr_width(self) -> int:
        return max(1, (self.depth - 1).bit_length())


@dataclass(frozen=True)
class Field:
    """A token field. ``enum``: for a field of an enum type, the enum's name and its members
    as (name, value) pairs; tools print and parse such a field by member name. ``bound``
    (a kind's last field only: ``i: u4 < 11``): its values are 0..bound-1, so the kind owns
    fewer ids (:attr:`TokenKind.ids`)."""
    name: str
    width: int
    signed: bool = False
    enum: tuple[str, tuple[tuple[str, int], ...]] | None = None
    bound: int | None = None


@dataclass(frozen=True)
class TokenKind:
    """A token kind of the top circuit: its payload fields in declaration order."""
    name: str
    fields: tuple[Field, ...]
    loc: Loc
    halt: bool = False

    @property
    def payload_bits(self) -> int:
        return sum(f.width for f in self.fields)

    @property
    def ids(self) -> int:
        """How many ids the kind owns: 2**payload_bits, or with a bound on its last field
        (the payload's highest bits), bound * 2**(the other fields' bits): the payloads
        below ``bound << (those bits)``."""
        last = self.fields[-1] if self.fields else None
        if last is None or last.bound is None:
            return 1 << self.payload_bits
        return last.bound << (self.payload_bits - last.width)


@dataclass(frozen=True)
class Token:
    """A concrete token value: a kind index and one int per field (unsigned encoding)."""
    kind: int
    fields: tuple[int, ...] = ()


@dataclass(frozen=True)
class Instance:
    """A module instance the elaborator inlined: its hierarchical ``path`` (``divu$1``,
    ``alu.add``), the ``module`` it instantiates, the ``loc`` of the line that instantiates
    it, and the index of the instance it sits in (``parent``; -1: the top)."""
    path: str
    module: str
    loc: Loc
    parent: int = -1


@dataclass
class Circuit:
    """A whole elaborated circuit. ``nodes`` is in topological order (args precede users).
    ``names`` maps every named source signal (hierarchical) to its node id.
    ``start`` is the default first token, if the source declares one.

    A top ``circuit`` has token kinds, memories and one TOKEN_OUT, and no INPUT/OUTPUT.
    An elaborated ``module`` (for testing it alone) has INPUT and OUTPUT nodes instead, no
    kinds and no memories; ``ports`` lists its ports in declaration order as
    (name, "in"|"out", width, signed).

    ``instances`` lists the module instances the source made (:class:`Instance`) and
    ``inst_of[i]`` the innermost one node ``i`` was made in (-1: the top; a node two
    instances made alike is the first one's); :meth:`instance_of` reads it (-1 for a node
    past its end: circuits built node by node record none)."""
    name: str
    loc: Loc
    nodes: list[Node] = field(default_factory=list)
    memories: dict[str, Memory] = field(default_factory=dict)
    kinds: list[TokenKind] = field(default_factory=list)
    start: Token | None = None
    names: dict[str, int] = field(default_factory=dict)
    ports: list[tuple[str, str, int, bool]] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    inst_of: list[int] = field(default_factory=list)
    #: (kinds, their first ids, their payload widths): the vocabulary's layout, made again
    #: when the kinds change (:meth:`_layout`)
    _vocab: tuple[tuple[TokenKind, ...], list[int], list[int]] | None = field(
        default=None, repr=False, compare=False)

    def instance_of(self, nid: int) -> int:
        """The index in :attr:`instances` of the innermost instance that made node ``nid``,
        or -1 (the top circuit itself, or not recorded)."""
        return self.inst_of[nid] if nid < len(self.inst_of) else -1

    # ---- construction -------------------------------------------------------------------
    def add(self, op: Op, width: int, args: tuple[int, ...] = (), param: Any = None,
            loc: Loc = NOLOC, name: str | None = None) -> int:
        """Append a node and return its id (no checking here; see :meth:`check`)."""
        nid = len(self.nodes)
        self.nodes.append(Node(nid, op, width, tuple(args), param, loc, name))
        if name is not None:
            self.names.setdefault(name, nid)
        return nid

    @property
    def kind_width(self) -> int:
        return max(1, (len(self.kinds) - 1).bit_length())

    # ---- the token vocabulary ---------------------------------------------------------------
    # Kind k owns TokenKind.ids consecutive ids (2**payload_bits, fewer with a bound) after
    # the kinds before it; within a kind the id is the payload, its fields concatenated with
    # the first field in the lowest bits.
    def _layout(self) -> tuple[tuple[TokenKind, ...], list[int], list[int]]:
        v = self._vocab
        if v is None or len(v[0]) != len(self.kinds) or \
                any(a is not b for a, b in zip(v[0], self.kinds)):
            offsets, off, counts = [], 0, [k.ids for k in self.kinds]
            for n in counts:
                offsets.append(off)
                off += n
            v = self._vocab = (tuple(self.kinds), offsets, counts)
        return v

    def kind_offsets(self) -> list[int]:
        """The first token id of each kind, in kind order."""
        return list(self._layout()[1])

    @property
    def vocab_size(self) -> int:
        """How many distinct tokens the circuit has: the sum over kinds of their ids."""
        return sum(k.ids for k in self.kinds)

    def token_id(self, tok: Token) -> int:
        """The vocabulary id of ``tok`` (fields must already fit their widths)."""
        payload, bit = 0, 0
        for f, v in zip(self.kinds[tok.kind].fields, tok.fields):
            payload |= v << bit
            bit += f.width
        return self._layout()[1][tok.kind] + payload

    def token_from_id(self, tid: int) -> Token:
        """The token whose vocabulary id is ``tid``; ValueError outside ``0..vocab_size-1``."""
        kinds, offsets, counts = self._layout()
        index = bisect.bisect_right(offsets, tid) - 1
        if index >= 0 and tid < offsets[index] + counts[index]:
            payload, fields = tid - offsets[index], []
            for f in kinds[index].fields:
                fields.append(payload & ((1 << f.width) - 1))
                payload >>= f.width
            return Token(index, tuple(fields))
        raise ValueError(f"token id {tid} is outside the vocabulary 0..{self.vocab_size - 1}")

    # ---- queries ------------------------------------------------------------------------
    def token_out(self) -> Node:
        outs = [n for n in self.nodes if n.op is Op.TOKEN_OUT]
        if len(outs) != 1:
            raise ValueError(f"circuit {self.name} has {len(outs)} TOKEN_OUT nodes, expected 1")
        return outs[0]

    @property
    def state_memories(self) -> dict[str, Memory]:
        """The memories held in state (GDN recurrent state once compiled): all but the
        ``table`` ROMs, whose words the token tables hold."""
        return {n: m for n, m in self.memories.items() if not m.table}

    def token_only(self) -> set[int]:
        """The nodes whose value is a function of the current token alone: token kind and
        field reads, constants, logic over those, and reads of a ``table`` ROM at such an
        address."""
        out: set[int] = set()
        for n in self.nodes:
            if n.op in (Op.TOKEN_KIND, Op.TOKEN_FIELD, Op.CONST):
                out.add(n.id)
            elif n.op is Op.MEM_READ:
                if self.memories[n.param].table and n.args[0] in out:
                    out.add(n.id)
            elif (n.op not in (Op.MEM_WRITE, Op.TOKEN_OUT, Op.INPUT, Op.OUTPUT) and n.args
                  and all(a in out for a in n.args)):
                out.add(n.id)
        return out

    def writes(self, memory: str | None = None) -> list[Node]:
        return [n for n in self.nodes if n.op is Op.MEM_WRITE and (memory is None or n.param == memory)]

    def sink_inputs(self, n: Node) -> list[str]:
        """The user's names for the inputs of sink ``n``, one per argument: ``next.kind`` and
        ``next.Kind.field`` for the next token, ``mem write address`` / ``data`` /
        ``enable`` for a write to memory ``mem``, ``output port`` for a module's output."""
        if n.op is Op.TOKEN_OUT:
            return ["next.kind"] + [f"next.{k.name}.{f.name}" for k in self.kinds for f in k.fields]
        if n.op is Op.MEM_WRITE:
            return [f"{n.param} write {part}" for part in ("address", "data", "enable")]
        if n.op is Op.OUTPUT:
            return [f"output {n.param}"]
        return []

    def signals(self) -> list[str | None]:
        """For every node (by id), the user's name for what it computes: its own signal name,
        else the nearest named signal it feeds (the reader with the lowest id wins; a sink's
        inputs are named by :meth:`sink_inputs`); None when it feeds nothing named."""
        out: list[str | None] = [n.name for n in self.nodes]
        for n in reversed(self.nodes):      # every reader of n is final before n is visited
            names = self.sink_inputs(n) or [out[n.id]] * len(n.args)
            for a, name in zip(n.args, names):  # readers in falling id order: the lowest last
                if not self.nodes[a].name and name is not None:
                    out[a] = name
        return out

    def describe(self, nid: int) -> str:
        """How a message names node ``nid`` to the user: ``signal 'x'`` for a named signal,
        else the unnamed operation, where it is and what it feeds, e.g. ``the unnamed 'add'
        at f.hdl:3:9 (part of 'sum')`` -- never an internal node number."""
        n = self.nodes[nid]
        if n.name:
            return f"signal '{n.name}'"
        if n.op is Op.TOKEN_OUT:
            return f"the next token (at {n.loc})"
        if n.op is Op.MEM_WRITE:
            return f"the write of memory '{n.param}' at {n.loc}"
        head = (f"the read of memory '{n.param}'" if n.op is Op.MEM_READ
                else f"the unnamed '{n.op.value}'")
        feeds = self.signals()[nid]
        return f"{head} at {n.loc}" + (f" (part of '{feeds}')" if feeds else "")

    def graph(self) -> nx.DiGraph:
        """The dependency graph: an edge a -> b when node b reads node a."""
        import networkx as nx
        g = nx.DiGraph()
        g.add_nodes_from(n.id for n in self.nodes)
        g.add_edges_from((a, n.id) for n in self.nodes for a in n.args)
        return g

    def check(self) -> None:
        """Validate every structural rule of docs/ir.md; raise ValueError naming the node."""
        kinds = self.kinds
        wargs: dict[str, tuple[int, ...]] = {}     # a transparent memory's one write
        for n in self.nodes:
            if n.op is Op.MEM_WRITE and n.param in self.memories and \
                    self.memories[n.param].read_under_write == "new":
                if n.param in wargs:
                    raise ValueError(f"{n.loc}: IR node {n.id} (mem_write): a transparent "
                                     f"memory has one write")
                wargs[n.param] = n.args
        tonly = self.token_only() if any(m.table for m in self.memories.values()) else set()
        for n in self.nodes:
            def bad(msg: str) -> None:
                raise ValueError(f"{n.loc}: IR node {n.id} ({n.op.value}): {msg}")
            if any(a >= n.id or a < 0 for a in n.args):
                bad("argument does not precede the node")
            w = [self.nodes[a].width for a in n.args]
            if n.op in SINKS:
                if n.width != 0:
                    bad("sinks have width 0")
            elif not 1 <= n.width <= MAX_WIDTH:
                bad(f"width {n.width} outside 1..{MAX_WIDTH}")
            if any(x == 0 for x in w):
                bad("reads a sink")
            op = n.op
            if op is Op.CONST:
                if not (isinstance(n.param, int) and 0 <= n.param < (1 << n.width)) or n.args:
                    bad(f"constant {n.param!r} does not fit {n.width} bits")
            elif op is Op.TOKEN_KIND:
                if n.width != self.kind_width:
                    bad("kind width")
            elif op is Op.TOKEN_FIELD:
                k, f = n.param
                if n.width != kinds[k].fields[f].width:
                    bad("field width")
            elif op in BINARY_SAME_WIDTH:
                if len(w) != 2 or w[0] != w[1] or w[0] != n.width:
                    bad(f"operand widths {w} vs {n.width}")
            elif op is Op.NOT:
                if w != [n.width]:
                    bad("operand width")
            elif op in COMPARES:
                if len(w) != 2 or w[0] != w[1] or n.width != 1:
                    bad("compare widths")
            elif op in SHIFTS:
                if len(w) != 2 or w[0] != n.width:
                    bad("shift widths")
            elif op is Op.SLICE:
                if len(w) != 1 or not (0 <= n.param and n.param + n.width <= w[0]):
                    bad("slice range")
            elif op is Op.CONCAT:
                if not w or sum(w) != n.width:
                    bad("concat width")
            elif op is Op.MUX:
                if len(w) != 3 or w[0] != 1 or w[1] != w[2] or w[1] != n.width:
                    bad("mux widths")
            elif op is Op.MEM_READ:
                m = self.memories.get(n.param)
                if m is None or len(w) not in (1, 4) or n.width != m.width:
                    bad("memory read")
                if len(w) == 4 and m.read_under_write != "new":
                    bad("a read carries a write's arguments only on a transparent memory")
                if m.table and (m.kind is not MemKind.ROM or n.args[0] not in tonly):
                    bad("a table memory is a rom read at a token-only address")
                if m.read_under_write == "new" and n.args[1:] != wargs.get(n.param, ()):
                    bad("a transparent memory's read must carry its write's address, data "
                        "and enable (and only those)")
            elif op is Op.MEM_WRITE:
                m = self.memories.get(n.param)
                if m is None or m.kind is not MemKind.RAM or len(w) != 3 or w[1] != m.width or w[2] != 1:
                    bad("memory write")
            elif op is Op.INPUT:
                if n.args or not isinstance(n.param, str):
                    bad("input port")
            elif op is Op.OUTPUT:
                if len(w) != 1 or not isinstance(n.param, str):
                    bad("output port")
            elif op is Op.TOKEN_OUT:
                want = [self.kind_width] + [f.width for k in kinds for f in k.fields]
                if w != want:
                    bad(f"token out widths {w}, expected {want}")
        if self.kinds:
            self.token_out()
