"""Compile an IR circuit into straight-line source code, once: C (for cffi) or Python.

Takes: a checked :class:`hdl.ir.Circuit` and its :class:`hdl.sim.layout.Layout`.
Gives: source text. Three generators:

- :func:`c_source` - a C translation unit exporting ``dc_step`` / ``dc_run`` (circuits) or
  ``dc_batch`` (modules); see :data:`C_DECLS` for their signatures;
- :func:`python_source` - a Python module defining ``step(mem, tok, trace)`` (circuits) or
  ``evaluate(inputs)`` (modules) over Python ints;
- :func:`numpy_source` - a Python module defining ``batch(inputs, n)`` that evaluates a module
  on numpy ``uint64`` arrays (the vectorised path when no C compiler is available);
  :func:`numpy_cone_source` the same for the cone of any nodes, with chosen nodes supplied
  by the caller (the backend's token tables evaluate token-only logic on every token id).

Every node becomes one assignment ``v<id> = <expr>``; values are unsigned integers below
``2**width`` at all times (results are masked where an op can overflow). The op semantics
implemented here are the ones documented in ``docs/ir.md``; the three generators must agree
(``tests/hdl/test_sim.py`` checks them against each other on random IR). The ops that read the
same in all three languages (token reads, bitwise, wrapping arithmetic, compares, slices,
concatenation) are written once, in :func:`_common_expr`; each generator adds only shifts,
multiplexers, memory reads and constants in its own syntax.
"""
from __future__ import annotations

from typing import Callable

from hdl.ir import Circuit, Node, Op
from hdl.sim.layout import Layout

C_DECLS = """
int dc_step(uint64_t *mem, const uint64_t *tok, uint64_t *out, uint64_t *wr, uint64_t *V);
long dc_run(uint64_t *mem, uint64_t *tok, long nsteps, uint64_t *outs, int *status,
            uint64_t *V);
void dc_batch(long n, const uint64_t *in, uint64_t *out, uint64_t *V);
"""
"""The cffi declarations of what :func:`c_source` exports.

``dc_step`` evaluates one step: ``tok`` is the token vector, ``out`` receives the next token
vector (all kinds' fields, as TOKEN_OUT lists them), ``wr`` receives one (memory index,
address, data) triple per effective write (the return value counts them; the writes are also
applied to ``mem``); ``V`` is a work array of one ``uint64`` per node, which receives every
node's value, indexed by node id (the trace).
``dc_run`` runs up to ``nsteps`` steps from ``tok`` (updated in place), storing each next
token vector (other kinds' fields zeroed) in ``outs``; it stops after a halt kind, and returns
the number of steps done; ``*status`` is 1 if the last next token had a kind index with no
kind (then that raw vector is the last one stored), else 0.
``dc_batch`` evaluates a module on ``n`` input vectors: ``in[j*n + i]`` is input port j of
vector i, ``out[j*n + i]`` output port j (``V`` as above, scratch)."""


def mask(width: int) -> int:
    return (1 << width) - 1


_BITWISE = {Op.AND: "&", Op.OR: "|", Op.XOR: "^"}
_WRAPPING = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*"}


def _common_expr(c: Circuit, lay: Layout | None, n: Node, a: list[str],
                 lit: Callable[[int], str], boolean: Callable[[str], str]) -> str | None:
    """The expression for ``n`` when it is written the same way in every target language
    (token reads, bitwise ops, wrapping arithmetic, compares, slices, concatenation), else
    None.

    ``lay`` locates token fields in the token vector ``tok`` (None for modules, which read
    no token); ``a`` are the argument expressions; ``lit`` writes an unsigned constant in the target
    (``255``, ``U(255)``, ``0xffULL``) and ``boolean`` turns a comparison into a 0/1 value."""
    op = n.op
    m = lit(mask(n.width))
    if op is Op.TOKEN_KIND:
        return "tok[0]"
    if op is Op.TOKEN_FIELD:
        assert lay is not None
        k, f = n.param
        return f"tok[{lay.field_offset[k][f]}]"
    if op in _BITWISE:
        return f"{a[0]} {_BITWISE[op]} {a[1]}"
    if op is Op.NOT:
        return f"{a[0]} ^ {m}"
    if op in _WRAPPING:
        return f"({a[0]} {_WRAPPING[op]} {a[1]}) & {m}"
    if op is Op.EQ:
        return boolean(f"{a[0]} == {a[1]}")
    if op is Op.ULT:
        return boolean(f"{a[0]} < {a[1]}")
    if op is Op.SLT:   # flipping the sign bits turns a signed order into an unsigned one
        s = lit(1 << (c.nodes[n.args[0]].width - 1))
        return boolean(f"({a[0]} ^ {s}) < ({a[1]} ^ {s})")
    if op is Op.SLICE:
        return f"({a[0]} >> {lit(n.param)}) & {m}"
    if op is Op.CONCAT:
        parts, shift = [], 0
        for x, ax in zip(reversed(n.args), reversed(a)):
            parts.append(ax if shift == 0 else f"({ax} << {lit(shift)})")
            shift += c.nodes[x].width
        return " | ".join(reversed(parts))
    return None


# ---- C --------------------------------------------------------------------------------------

#: Value nodes per generated C function. gcc's time on one straight-line function grows faster
#: than linearly with its length (20,000 nodes in one function: ~20 s at -O2); short functions
#: at -O1 keep the build about linear (~0.3 ms per node) and run as fast (measured with
#: benchmarks/sim_speed.py: within noise of -O2 and of 1,500-node functions).
C_CHUNK = 300


def _c_expr(c: Circuit, lay: Layout, n: Node, ref) -> str:
    a = [ref(x) for x in n.args]
    w = n.width
    m = f"0x{mask(w):x}ULL"
    wrap = (lambda e: e) if w == 64 else (lambda e: f"(({e}) & {m})")
    op = n.op
    if op is Op.CONST:
        return f"0x{n.param:x}ULL"
    if op is Op.INPUT:
        return f"V[{n.id}]"
    common = _common_expr(c, lay, n, a, lambda x: f"0x{x:x}ULL", lambda e: f"(uint64_t)({e})")
    if common is not None:
        return common
    if op is Op.SHL:
        return f"({a[1]} >= {w} ? 0 : {wrap(f'{a[0]} << {a[1]}')})"
    if op is Op.LSHR:
        return f"({a[1]} >= {w} ? 0 : {a[0]} >> {a[1]})"
    if op is Op.ASHR:
        neg = f"({a[0]} >> {w - 1})"
        return (f"({a[1]} >= {w} ? ({neg} ? {m} : 0) : "
                f"(({a[0]} >> {a[1]}) | ({neg} ? ({m} ^ ({m} >> {a[1]})) : 0)))")
    if op is Op.MUX:
        return f"({a[0]} ? {a[2]} : {a[1]})"
    if op is Op.MEM_READ:
        i = lay.mem_index(n.param)
        old = f"mem[{lay.mem_offset[i]} + {a[0]}]"
        if len(a) == 4:         # transparent: this step's write is seen
            old = f"({a[3]} && {a[1]} == {a[0]} ? {a[2]} : {old})"
        return f"({a[0]} < {lay.mem_depth[i]}ULL ? {old} : 0)"
    raise AssertionError(f"no C code for {op}")


def _c_chunks(c: Circuit, lay: Layout) -> tuple[list[str], list[str]]:
    """Functions ``chunk<j>(V, mem, tok)`` evaluating the value nodes in order, each storing
    node i's value in ``V[i]``; and the statements that call them."""
    values = [n for n in c.nodes if n.width]
    chunk_of: dict[int, int] = {}
    defs, calls = [], []
    for idx, lo in enumerate(range(0, len(values), C_CHUNK)):
        part = values[lo:lo + C_CHUNK]
        for n in part:
            chunk_of[n.id] = idx

        def ref(x: int, idx: int = idx) -> str:
            return f"v{x}" if chunk_of[x] == idx else f"V[{x}]"
        defs.append(f"static __attribute__((noinline)) void chunk{idx}(uint64_t *restrict V, "
                    "const uint64_t *restrict mem, const uint64_t *restrict tok) {")
        for n in part:
            store = "" if n.op is Op.INPUT else f" V[{n.id}] = v{n.id};"
            defs.append(f"    const uint64_t v{n.id} = {_c_expr(c, lay, n, ref)};{store}")
        defs += ["}", ""]
        calls.append(f"    chunk{idx}(V, mem, tok);")
    return defs, calls


def c_source(c: Circuit) -> str:
    """The C translation unit for circuit ``c`` (see :data:`C_DECLS`). Uses no libc."""
    lay = Layout.of(c)
    head = [f"/* deltachip reference simulator: circuit {c.name}, {len(c.nodes)} nodes */",
            "#include <stdint.h>", ""]
    defs, calls = _c_chunks(c, lay)
    stubs = ["int dc_step(uint64_t *mem, const uint64_t *tok, uint64_t *out, uint64_t *wr,"
             " uint64_t *V) { return -1; }",
             "long dc_run(uint64_t *mem, uint64_t *tok, long nsteps, uint64_t *outs,"
             " int *status, uint64_t *V) { return -1; }",
             "void dc_batch(long n, const uint64_t *in, uint64_t *out, uint64_t *V) { }", ""]
    if not c.kinds:
        body = ["void dc_batch(long n, const uint64_t *in, uint64_t *out, uint64_t *V) {",
                "    const uint64_t *mem = 0, *tok = 0;",
                "    for (long i = 0; i < n; i++) {"]
        body += [f"    V[{nid}] = in[{j}L * n + i];" for j, (_, nid) in enumerate(lay.inputs)]
        body += ["    " + x for x in calls]
        body += [f"        out[{j}L * n + i] = V[{nid}];"
                 for j, (_, nid) in enumerate(lay.outputs)]
        body += ["    }", "}", ""]
        return "\n".join(head + defs + body + stubs[:2])
    tout = c.token_out()
    body = ["int dc_step(uint64_t *mem, const uint64_t *tok, uint64_t *out, uint64_t *wr,"
            " uint64_t *V) {"]
    body += calls
    body += [f"    out[{j}] = V[{x}];" for j, x in enumerate(tout.args)]
    body.append("    int nw = 0;")
    for n in c.nodes:
        if n.op is Op.MEM_WRITE:
            i = lay.mem_index(n.param)
            ad, da, en = (f"V[{x}]" for x in n.args)
            body.append(f"    if ({en} && {ad} < {lay.mem_depth[i]}ULL) {{ "
                        f"mem[{lay.mem_offset[i]} + {ad}] = {da}; wr[3 * nw] = {i}; "
                        f"wr[3 * nw + 1] = {ad}; wr[3 * nw + 2] = {da}; nw++; }}")
    body += ["    return nw;", "}", ""]
    tl = lay.token_len
    run = [
        "long dc_run(uint64_t *mem, uint64_t *tok, long nsteps, uint64_t *outs, int *status,"
        " uint64_t *V) {",
        f"    uint64_t out[{tl}];",
        f"    uint64_t wr[{3 * lay.write_ports + 3}];",
        "    *status = 0;",
        "    for (long s = 0; s < nsteps; s++) {",
        "        dc_step(mem, tok, out, wr, V);",
        f"        uint64_t *o = outs + s * {tl};",
        f"        for (int j = 0; j < {tl}; j++) tok[j] = 0;",
        "        tok[0] = out[0];",
        "        switch (out[0]) {"]
    for k, offs in enumerate(lay.field_offset):
        copy = " ".join(f"tok[{j}] = out[{j}];" for j in offs)
        stop = " return s + 1;" if lay.halt[k] else ""
        run.append(f"        case {k}: {copy} for (int j = 0; j < {tl}; j++) o[j] = tok[j];"
                   f"{stop} break;")
    run += [f"        default: for (int j = 0; j < {tl}; j++) o[j] = out[j];"
            " *status = 1; return s + 1;",
            "        }", "    }", "    return nsteps;", "}", ""]
    return "\n".join(head + defs + body + run + stubs[2:])


# ---- Python (scalar ints) -------------------------------------------------------------------

def _py_expr(c: Circuit, lay: Layout, n: Node, inp: dict[int, str]) -> str:
    a = [f"v{x}" for x in n.args]
    w = n.width
    m = mask(w)
    op = n.op
    if op is Op.CONST:
        return str(n.param)
    if op is Op.INPUT:
        return inp[n.id]
    common = _common_expr(c, lay, n, a, str, lambda e: f"int({e})")
    if common is not None:
        return common
    if op is Op.SHL:
        return f"(0 if {a[1]} >= {w} else ({a[0]} << {a[1]}) & {m})"
    if op is Op.LSHR:
        return f"(0 if {a[1]} >= {w} else {a[0]} >> {a[1]})"
    if op is Op.ASHR:
        neg = f"({a[0]} >> {w - 1})"
        return (f"(({m} if {neg} else 0) if {a[1]} >= {w} else "
                f"({a[0]} >> {a[1]}) | (({m} ^ ({m} >> {a[1]})) if {neg} else 0))")
    if op is Op.MUX:
        return f"({a[2]} if {a[0]} else {a[1]})"
    if op is Op.MEM_READ:
        i = lay.mem_index(n.param)
        old = f"m{i}[{a[0]}]"
        if len(a) == 4:         # transparent: this step's write is seen
            old = f"({a[2]} if {a[3]} and {a[1]} == {a[0]} else {old})"
        return f"({old} if {a[0]} < {lay.mem_depth[i]} else 0)"
    raise AssertionError(f"no Python code for {op}")


def python_source(c: Circuit) -> str:
    """Python source for circuit ``c``.

    Circuits: ``step(mem, tok, trace) -> (out, writes)`` where ``mem`` is a list of lists
    (one per memory, updated in place), ``tok`` the token vector, ``trace`` a list of
    ``len(c.nodes)`` ints to fill or None; ``out`` is the next token vector and ``writes``
    the list of effective (memory index, address, data) writes.
    Modules: ``evaluate(inp) -> list`` from the list of input port values (in
    ``Layout.inputs`` order) to the list of output values (``Layout.outputs`` order)."""
    lay = Layout.of(c)
    lines = [f"# deltachip reference simulator: circuit {c.name}, {len(c.nodes)} nodes"]
    if not c.kinds:
        ports = {nid: f"inp[{j}]" for j, (_, nid) in enumerate(lay.inputs)}
        lines.append("def evaluate(inp):")
        lines += [f"    v{n.id} = {_py_expr(c, lay, n, ports)}" for n in c.nodes if n.width]
        lines.append("    return [" + ", ".join(f"v{nid}" for _, nid in lay.outputs) + "]")
        return "\n".join(lines) + "\n"
    lines.append("def step(mem, tok, trace):")
    lines += [f"    m{i} = mem[{i}]" for i in range(len(lay.mem_names))]
    lines += [f"    v{n.id} = {_py_expr(c, lay, n, {})}" for n in c.nodes if n.width]
    lines.append("    out = [" + ", ".join(f"v{x}" for x in c.token_out().args) + "]")
    lines.append("    if trace is not None:")
    lines.append("        trace[:] = (" + ", ".join(
        f"v{n.id}" if n.width else "0" for n in c.nodes) + ",)")
    lines.append("    writes = []")
    for n in c.nodes:
        if n.op is Op.MEM_WRITE:
            i = lay.mem_index(n.param)
            ad, da, en = (f"v{x}" for x in n.args)
            lines.append(f"    if {en} and {ad} < {lay.mem_depth[i]}:")
            lines.append(f"        m{i}[{ad}] = {da}; writes.append(({i}, {ad}, {da}))")
    lines.append("    return out, writes")
    return "\n".join(lines) + "\n"


# ---- numpy (vectorised modules) -------------------------------------------------------------

def _np_expr(c: Circuit, n: Node, inp: dict[int, str],
             tables: dict[str, str] | None = None) -> str:
    a = [f"v{x}" for x in n.args]
    w = n.width
    m = f"U({mask(w)})"
    op = n.op
    if n.id in inp:      # an input port, or a node the caller supplies
        return inp[n.id]
    if op is Op.CONST:
        return f"full(n, {n.param}, dtype=u64)"
    common = _common_expr(c, None, n, a, lambda x: f"U({x})", lambda e: f"({e}).astype(u64)")
    if common is not None:
        return common
    lim = f"U({w - 1})"
    if op is Op.SHL:
        return f"where({a[1]} >= {w}, U(0), ({a[0]} << minimum({a[1]}, {lim})) & {m})"
    if op is Op.LSHR:
        return f"where({a[1]} >= {w}, U(0), {a[0]} >> minimum({a[1]}, {lim}))"
    if op is Op.ASHR:
        sh = f"minimum({a[1]}, {lim})"
        return (f"where(({a[0]} >> U({w - 1})) != 0, ({a[0]} >> {sh}) | ({m} ^ ({m} >> {sh})), "
                f"{a[0]} >> {sh})")
    if op is Op.MUX:
        return f"where({a[0]} != 0, {a[2]}, {a[1]})"
    if op is Op.MEM_READ and tables and n.param in tables:
        # a table rom: its words and one 0 past them (an address >= depth reads 0)
        depth = c.memories[n.param].depth
        return f"{tables[n.param]}[minimum({a[0]}, U({depth}))]"
    raise AssertionError(f"no numpy code for {op} (modules only)")


def numpy_cone_source(c: Circuit, outputs: list[int], inputs: dict[int, str],
                      tables: dict[str, str] | None = None) -> str:
    """numpy source defining ``batch(inp, n) -> list`` that evaluates the nodes ``outputs``
    on ``uint64`` arrays of length ``n``: only the nodes they depend on, and a node in
    ``inputs`` (id -> expression over the list ``inp``, e.g. ``"inp[0]"``) reads that
    expression instead of its own op. The only memory reads allowed in the cone are of the
    ROMs in ``tables`` (memory name -> the name of a global array holding its words and a
    0 after them)."""
    need: set[int] = set()
    todo = list(outputs)
    while todo:
        x = todo.pop()
        if x not in need:
            need.add(x)
            if x not in inputs:
                todo.extend(c.nodes[x].args)
    lines = [f"# deltachip vectorised evaluator: {c.name}, {len(need)} of {len(c.nodes)} nodes",
             "from numpy import uint64 as U, uint64 as u64, full, where, minimum",
             "def batch(inp, n):"]
    lines += [f"    v{i} = {_np_expr(c, c.nodes[i], inputs, tables)}" for i in sorted(need)]
    lines.append("    return [" + ", ".join(f"v{nid}" for nid in outputs) + "]")
    return "\n".join(lines) + "\n"


def numpy_source(c: Circuit) -> str:
    """numpy source for module ``c``: ``batch(inp, n) -> list`` from a list of ``uint64``
    arrays of length ``n`` (one per input port, ``Layout.inputs`` order) to a list of arrays
    (one per output port). ASHR by >= width saturates at width-1, which gives the sign fill."""
    lay = Layout.of(c)
    return numpy_cone_source(c, [nid for _, nid in lay.outputs],
                             {nid: f"inp[{j}]" for j, (_, nid) in enumerate(lay.inputs)})
