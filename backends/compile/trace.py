"""The source trace: every MLP neuron, residual lane and GDN key head of a compiled chip traced
to the IR node it was made for, and so to a ``file:line:col`` (after FIRRTL's source locators).

Takes: the allocated :class:`backends.compile.program.Program` and its :class:`backends.compile.emit.Numerics`
(:func:`record`), or a chip.json dict (:class:`ChipTrace`). Gives: chip.json's ``"trace"``
section, and the two answers of ``deltachip explain``: :meth:`ChipTrace.layer` (what each
neuron and head of a layer is for) and :meth:`ChipTrace.source` (what one source line
became, at what cost in neurons, lanes and heads; on a line that instantiates a module, the
instance's total and its breakdown by the module's own lines, from the circuit's
``instances``).

The section, version :data:`TRACE_VERSION` (node ids index the nodes of chip.json's
``circuit``, which carry their file, line and column)::

    "trace": {
      "version": 1,
      "neurons": [[[node, count], ...], ...],  # per layer: runs over the MLP rows in order
                                               # (row i of gate_proj/up_proj, column i of down_proj)
      "lanes": [[node, dim, slot], ...],       # per logical lane: residual dim (ballast
                                               # included), write slot (-1 embedding, 2L the
                                               # GDN of layer L, 2L+1 its MLP); a token lane
                                               # (node -1) adds its label, e.g. "tok.Count.value.3"
      "heads": [[layer, key_head, memory, port, rowblock, slice], ...],   # one per GDN bank
      "ports": {memory: {"reads": [node, ...], "write": node or null}}
    }

A neuron that clears a reused dim (``backends.compile.lanes``) is traced to the lane it makes room for.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from common.errors import UserError
from common.kinds import MemKind
from hdl.ir import Circuit, Op
from backends.chipdir.chipfile import circuit_from_json
from backends.chipdir.chipschema import kind_ids
from backends.compile.program import Program

TRACE_VERSION = 1
RECOMPILE = "recompile it with `deltachip compile`"


class TraceError(UserError):
    """A chip without a readable trace, or a layer / source line the chip does not have."""


# ---- writing -------------------------------------------------------------------------------

def _runs(nodes: list[int]) -> list[list[int]]:
    """``[[node, count], ...]``: consecutive equal nodes folded."""
    out: list[list[int]] = []
    for n in nodes:
        if out and out[-1][0] == n:
            out[-1][1] += 1
        else:
            out.append([n, 1])
    return out


def record(prog: Program, ballast: int) -> dict[str, Any]:
    """The ``"trace"`` section for the allocated ``prog`` (``ballast``: residual dims before
    the first lane, ``Numerics.n_b``)."""
    lanes = []
    for i, lane in enumerate(prog.lanes):
        entry: list[Any] = [lane.node, ballast + prog.dim(i), lane.slot]
        if lane.node < 0:
            entry.append(lane.label)
        lanes.append(entry)
    heads = []
    for mem in prog.mems.values():
        for port in range(mem.ports):
            for rowblock in range(mem.rowblocks):
                for sl in range(mem.slices):
                    layer, key_head = mem.bank(port, rowblock, sl)
                    heads.append([layer, key_head, mem.name, port, rowblock, sl])
    return {
        "version": TRACE_VERSION,
        "neurons": [_runs([n.node for n in prog.mlp.get(layer, [])])
                    for layer in range(prog.n_layers)],
        "lanes": lanes,
        "heads": sorted(heads),
        "ports": {mem.name: {"reads": [port.node for port in mem.reads],
                             "write": mem.writes[0].node if mem.writes else None}
                  for mem in prog.mems.values()},
    }


# ---- reading -------------------------------------------------------------------------------

def ranges(values) -> str:
    """``1-3, 5`` for [1, 2, 3, 5]; ``-`` when empty."""
    vs = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        parts.append(str(vs[i]) if i == j else f"{vs[i]}-{vs[j]}")
        i = j + 1
    return ", ".join(parts) or "-"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass
class Cost:
    """What one IR node became: neurons per layer (and their rows), residual dims, key heads."""
    rows: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    dims: list[int] = field(default_factory=list)
    heads: list[tuple[int, int]] = field(default_factory=list)
    table: list[int] = field(default_factory=list)   # of dims: token-table lanes (embedding)

    @property
    def neurons(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def __bool__(self) -> bool:
        return bool(self.rows or self.dims or self.heads)


@dataclass(frozen=True)
class Head:
    """One GDN key head of the chip (a bank of a memory)."""
    layer: int
    key_head: int
    memory: str
    port: int
    rowblock: int
    slice: int


class ChipTrace:
    """The trace of a compiled chip, read from its chip.json dict (see the module docstring);
    TraceError when the chip has none or an unknown version."""

    def __init__(self, chip: dict[str, Any], where: str = "chip.json"):
        trace = chip.get("trace")
        if trace is None:
            raise TraceError(f"{where}: this checkpoint has no source trace (it was compiled "
                             f"before deltachip recorded one): {RECOMPILE}")
        if trace.get("version") != TRACE_VERSION:
            raise TraceError(f"{where}: source trace version {trace.get('version')!r}, this "
                             f"deltachip reads version {TRACE_VERSION}: {RECOMPILE}")
        try:
            self.circuit: Circuit = circuit_from_json(chip["circuit"])
            self.n_layers = len(trace["neurons"])
            self.rows = [[n for n, count in runs for _ in range(count)]
                         for runs in trace["neurons"]]
            self.lanes = [(entry[0], entry[1], entry[2], entry[3] if len(entry) > 3 else "")
                          for entry in trace["lanes"]]
            self.heads = [Head(*h) for h in trace["heads"]]
            self.ports = trace["ports"]
            self.memories = chip["memories"]
            self.kinds = chip["tokens"]["kinds"]
            self.v_per_k = chip["target"]["v_per_k"]
            self.target = chip["target"]["name"]
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise TraceError(f"{where}: corrupt source trace ({e.__class__.__name__}: {e}): "
                             f"{RECOMPILE}") from None
        self.signals = self.circuit.signals()
        self.costs: dict[int, Cost] = defaultdict(Cost)
        for layer, rows in enumerate(self.rows):
            for row, node in enumerate(rows):
                self.costs[node].rows[layer].append(row)
        for node, dim, slot, _ in self.lanes:
            self.costs[node].dims.append(dim)
            if slot < 0 and node >= 0:
                self.costs[node].table.append(dim)
        for h in self.heads:        # a read port's own heads; a write goes into every head
            reads, write = self.ports[h.memory]["reads"], self.ports[h.memory]["write"]
            if reads:
                self.costs[reads[h.port]].heads.append((h.layer, h.key_head))
            if write is not None:
                self.costs[write].heads.append((h.layer, h.key_head))

    # ---- naming ----------------------------------------------------------------------------
    def loc(self, node: int, short: bool = False) -> str:
        """``file:line:col`` of ``node`` (``line:col`` with ``short``)."""
        if node < 0:
            return "<chip>"
        loc = self.circuit.nodes[node].loc
        return f"{loc.line}:{loc.col}" if short else f"{_show(loc.file)}:{loc.line}:{loc.col}"

    def signal(self, node: int) -> str:
        """The user's signal a node computes (``'pc'``) or is part of
        (``part of 'next.Run.pc'``)."""
        if node < 0:
            return "-"
        n = self.circuit.nodes[node]
        if n.name:
            return f"'{n.name}'"
        if n.op is Op.TOKEN_OUT:
            return "the next token"
        if n.op is Op.MEM_WRITE:
            return f"the write of '{n.param}'"
        feeds = self.signals[node]
        return f"part of '{feeds}'" if feeds else "-"

    def what(self, node: int) -> str:
        """The operation of ``node``: its IR op, or ``read of 'mem'`` for a memory read."""
        if node < 0:
            return "(chip)"
        n = self.circuit.nodes[node]
        return f"read {n.param}" if n.op is Op.MEM_READ else n.op.value

    def head_text(self, h: Head) -> str:
        """One line on key head ``h``: its value heads, memory, port and the words it holds."""
        m = self.memories[h.memory]
        per_row = 1 << m["pack"]
        first = h.rowblock * m["rows_per_bank"] * per_row
        last = min(m["depth"], (h.rowblock + 1) * m["rows_per_bank"] * per_row) - 1
        vh = [h.key_head * self.v_per_k + v for v in range(self.v_per_k)]
        reads, write = self.ports[h.memory]["reads"], self.ports[h.memory]["write"]
        part = f", slice {h.slice + 1} of {m['slices']}" if m["slices"] > 1 else ""
        text = (f"key head {h.key_head} ({_span('value head', vh)}): {m['kind']} "
                f"'{h.memory}' {_span('word', range(first, last + 1))}{part}")
        if reads:
            read = reads[h.port]
            text += (f"; read port {h.port} at {self.loc(read)}"
                     f" (address: {self._operand(read, 0)})")
        if write is not None:
            text += f"; written at {self.loc(write)} (address: {self._operand(write, 0)})"
        return text

    def _operand(self, node: int, index: int) -> str:
        """Argument ``index`` of ``node`` in words: ``'name'``, or ``the 'op' at line:col``."""
        arg = self.circuit.nodes[node].args[index]
        name = self.circuit.nodes[arg].name
        return f"'{name}'" if name else f"the {self.what(arg)} at {self.loc(arg, short=True)}"

    # ---- the two questions -----------------------------------------------------------------
    def layer(self, layer: int) -> str:
        """What every MLP neuron, written lane and GDN key head of ``layer`` is for."""
        if not 0 <= layer < self.n_layers:
            raise TraceError(f"--layer {layer}: the chip has {self.n_layers} layers "
                             f"(0..{self.n_layers - 1})")
        rows = self.rows[layer]
        heads = [h for h in self.heads if h.layer == layer]
        out = [f"layer {layer} of {self.n_layers} (circuit {self.circuit.name}, target "
               f"{self.target}): {plural(len(rows), 'MLP neuron')}, "
               f"{plural(len(heads), 'GDN key head')}"]
        if rows:
            out.append(f"MLP neurons (row i: gate_proj/up_proj row i, down_proj column i of "
                       f"model.layers.{layer}.mlp):")
            by_node: dict[int, list[int]] = defaultdict(list)
            for row, node in enumerate(rows):
                by_node[node].append(row)
            out += self._table([(_span("row", r), len(r), node) for node, r in by_node.items()],
                               "neuron")
        written = defaultdict(list)
        for node, dim, slot, _ in self.lanes:
            if slot in (2 * layer, 2 * layer + 1):
                written[node].append(dim)
        if written:
            out.append("lanes written (residual dims):")
            out += self._table([(_span("dim", dims), len(dims), node)
                                for node, dims in sorted(written.items(),
                                                         key=lambda kv: min(kv[1]))], "lane")
        if heads:
            out.append(f"GDN key heads (model.layers.{layer}.linear_attn):")
            out += [f"  {self.head_text(h)}" for h in heads]
        return "\n".join(out)

    def _table(self, entries: list[tuple[str, int, int]], unit: str) -> list[str]:
        """Aligned lines ``  <where>  <count> <unit>s  <op>  <file:line:col>  <signal>``."""
        cells = [(where, plural(count, unit), self.what(node), self.loc(node), self.signal(node))
                 for where, count, node in entries]
        widths = [max(len(c[i]) for c in cells) for i in range(4)]
        return ["  " + "  ".join(c[i].ljust(widths[i]) for i in range(4)) + "  " + c[4]
                for c in cells]

    def _cost_text(self, cost: Cost, write: bool = False) -> str:
        """``3 neurons (layer 0 rows 0-2); 1 lane (dim 7); 2 key heads (...)``."""
        parts = []
        if cost.rows:
            per = ", ".join(f"layer {L} {_span('row', r)}" for L, r in sorted(cost.rows.items()))
            parts.append(f"{plural(cost.neurons, 'neuron')} ({per})")
        if cost.table:
            parts.append(f"{plural(len(cost.table), 'lane')} from the embedding (a token "
                         f"table: its value on every token id; {_span('dim', cost.table)})")
        elif cost.dims:
            parts.append(f"{plural(len(cost.dims), 'lane')} ({_span('dim', cost.dims)})")
        if cost.heads:
            parts.append(f"{'writes into ' * write}{plural(len(cost.heads), 'key head')} "
                         f"({_heads_text(cost.heads)})")
        return "; ".join(parts)

    def _members(self) -> dict[int, list[int]]:
        """Instance index -> every node made in it or in the instances inside it."""
        c = self.circuit
        out: dict[int, list[int]] = defaultdict(list)
        for n in c.nodes:
            k = c.instance_of(n.id)
            while k >= 0:
                out[k].append(n.id)
                k = c.instances[k].parent
        return out

    def _instance_text(self, i: int, nodes: list[int]) -> list[str]:
        """The lines on instance ``i`` (made of ``nodes``): its total, then per line of its
        module (an instance inside it counted on the line that makes it) what that line
        became, the costliest first."""
        c = self.circuit
        inst = c.instances[i]
        total = Cost()
        parts: dict[tuple, Cost] = defaultdict(Cost)
        for n in nodes:
            cost = self.costs.get(n)
            if not cost:
                continue
            _add(total, cost)
            k = c.instance_of(n)
            while k != i and c.instances[k].parent != i:
                k = c.instances[k].parent
            loc = c.nodes[n].loc if k == i else c.instances[k].loc
            _add(parts[(loc.file, loc.line, -1 if k == i else k)], cost)
        head = (f"  instance '{inst.path}' of module {inst.module}: "
                + (_total_text(total) + ", by its lines:" if total else "no weights"))
        lines = [head]
        for (f, ln, k), cost in sorted(parts.items(), key=lambda kv: (-kv[1].neurons,
                                                                        -len(kv[1].dims),
                                                                        kv[0])):
            what = f" (instance '{c.instances[k].path}' of {c.instances[k].module})" if k >= 0 else ""
            lines.append(f"    {_show(f)}:{ln}{what}: {_total_text(cost, short=True)}")
        return lines

    def files(self) -> list[str]:
        """Every source file the chip's circuit came from."""
        c = self.circuit
        seen = dict.fromkeys([c.loc.file] + [n.loc.file for n in c.nodes])
        return [f for f in seen if not f.startswith("<")]

    def match_file(self, given: str, spec: str | None = None) -> str:
        """The chip's source file that ``given`` names (the same path, the same file, or a
        path ending in it); TraceError (quoting ``--source spec``) listing the files when
        none or several match."""
        spec = spec or given
        files = self.files()
        same = [f for f in files if f == given or _same_file(f, given)]
        if not same:
            same = [f for f in files if f.endswith("/" + given.lstrip("./"))]
        if len(same) == 1:
            return same[0]
        listed = ", ".join(_show(f) for f in (same or files))
        if same:
            raise TraceError(f"--source {spec}: names several of the chip's files ({listed}); "
                             "give more of the path")
        raise TraceError(f"--source {spec}: not one of the chip's source files ({listed})")

    def source(self, file: str, line: int) -> str:
        """Where line ``line`` of ``file`` went: per IR node on it, its neurons (per layer),
        lanes and key heads; per module instance made on it, the instance's total and its
        breakdown by the module's own lines; memories and token kinds declared on it; and
        the totals."""
        path = self.match_file(file, f"{file}:{line}")
        c = self.circuit
        here = [i for i, inst in enumerate(c.instances)
                if inst.loc.file == path and inst.loc.line == line]
        members = self._members()
        inside = {n for i in here for n in members[i]}     # told under their instance
        on_line = [n for n in c.nodes if n.loc.file == path and n.loc.line == line
                   and n.id not in inside]
        costly = [n for n in on_line if self.costs.get(n.id)]
        out: list[str] = []
        total = Cost()
        for n in costly:
            cost = self.costs[n.id]
            out.append(f"  {self.what(n.id)} at {line}:{n.loc.col}, {self.signal(n.id)}: "
                       + self._cost_text(cost, n.op is Op.MEM_WRITE))
            _add(total, cost)
        for i in here:
            out += self._instance_text(i, members[i])
            for n in members[i]:
                _add(total, self.costs.get(n, Cost()))
        for name, m in c.memories.items():
            if m.loc.file == path and m.loc.line == line and m.table:
                out.append(f"  table rom '{name}' ({m.width} bits x {m.depth} words): no "
                           f"key head, its words are token-table lanes of the embedding")
            elif m.loc.file == path and m.loc.line == line:
                heads = [h for h in self.heads if h.memory == name]
                layers = sorted({h.layer for h in heads})
                how = ("its image preloaded into their recurrent state" if m.kind is MemKind.ROM
                       else "each write goes into every one")
                if m.read_under_write == "new":
                    how += " at the step's own position (transparent: reads see it)"
                    if self.memories.get(name, {}).get("vsel"):
                        how += ", its value heads holding different words"
                out.append(f"  {m.kind} '{name}' ({m.width} bits x {m.depth} words): "
                           f"{plural(len(heads), 'key head')} in layer{'s' * (len(layers) > 1)} "
                           f"{ranges(layers)}, {how}")
                total.heads += [(h.layer, h.key_head) for h in heads
                                if (h.layer, h.key_head) not in total.heads]
        for k, kind in zip(c.kinds, self.kinds):
            if k.loc.file == path and k.loc.line == line:
                dims = [dim for node, dim, _, label in self.lanes
                        if node < 0 and label.startswith(f"tok.{k.name}.")]
                ids = range(kind["offset"], kind["offset"] + kind_ids(kind))
                out.append(f"  token kind {k.name}: {_span('token id', ids)} (embedding and "
                           f"lm_head rows), {plural(len(dims), 'lane')} from the embedding"
                           + (f" ({_span('dim', dims)})" if dims else ""))
                total.dims += dims
        if c.loc.file == path and c.loc.line == line:
            dims = [dim for node, dim, _, label in self.lanes if label.startswith("tok.kind.")]
            out.append(f"  circuit {c.name}: {plural(len(dims), 'token-kind lane')} from the "
                       f"embedding ({_span('dim', dims)})")
            total.dims += dims
        where = f"{_show(path)}:{line}"
        free = len(on_line) - len(costly)
        if not out:
            return (f"{where} became no weights: no neuron, lane or key head comes from it"
                    + (f" ({plural(free, 'IR node')} on it cost nothing: constants, slices, "
                       "wiring)" if free else " (no IR node is on it)"))
        head = f"{where} became {_total_text(total)}:"
        tail = ([f"  ({plural(free, 'more IR node')} on this line cost nothing: constants, "
                 "slices, wiring)"] if free else [])
        return "\n".join([head] + out + tail)


def _add(total: Cost, cost: Cost) -> None:
    """Add ``cost`` into ``total`` (a key head counted once)."""
    for L, r in cost.rows.items():
        total.rows[L] += r
    total.dims += cost.dims
    total.heads += [h for h in cost.heads if h not in total.heads]


def _total_text(total: Cost, short: bool = False) -> str:
    """``45 MLP neurons in layers 0-1, 3-4, 16 lanes, 0 GDN key heads``; ``short``: what
    is there only, ``45 neurons in layers 0-1, 3-4; 16 lanes``."""
    layers = sorted(total.rows)
    where = f" in layer{'s' * (len(layers) > 1)} {ranges(layers)}" if layers else ""
    if short:
        parts = [f"{plural(total.neurons, 'neuron')}{where}"] if layers else []
        parts += [plural(len(total.dims), "lane")] if total.dims else []
        parts += [plural(len(total.heads), "key head")] if total.heads else []
        return "; ".join(parts)
    return (f"{plural(total.neurons, 'MLP neuron')}{where}, {plural(len(total.dims), 'lane')}, "
            f"{plural(len(total.heads), 'GDN key head')}")


def _span(word: str, values) -> str:
    """``row 3`` or ``rows 0-2, 5``."""
    values = list(values)
    return f"{word}{'s' * (len(values) > 1)} {ranges(values)}"


def _heads_text(heads: list[tuple[int, int]]) -> str:
    """``layer 2 heads 0-1, layer 3 head 0`` for (layer, key head) pairs."""
    by_layer: dict[int, list[int]] = defaultdict(list)
    for layer, key_head in heads:
        by_layer[layer].append(key_head)
    return ", ".join(f"layer {L} {_span('head', ks)}" for L, ks in sorted(by_layer.items()))


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _show(path: str) -> str:
    """``path`` as a user in the current directory would type it (relative when inside)."""
    if os.path.isabs(path):
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel
    return path


def parse_source(spec: str) -> tuple[str, int]:
    """``FILE.hdl:LINE`` -> (file, line); TraceError for anything else."""
    file, colon, line = spec.rpartition(":")
    # ASCII digits only: str.isdigit() also takes '²', which int() refuses
    if not colon or not file or not (line.isascii() and line.isdigit()) or int(line) < 1:
        raise TraceError(f"--source expects FILE.hdl:LINE (a line number from 1), got '{spec}'")
    return file, int(line)
