"""Small circuits built by hand with :meth:`hdl.ir.Circuit.add` (no front end needed).

Each builder returns a checked top circuit with token kinds, a start token and one TOKEN_OUT.
"""
from __future__ import annotations

from hdl.ir import Circuit, Field, Loc, Memory, Op, Token, TokenKind

L = Loc("test.hdl", 1, 1)


def loc(line: int) -> Loc:
    return Loc("test.hdl", line, 1)


def counter(width: int = 8, limit: int = 9) -> Circuit:
    """Count(value) -> Count(value+1) until value == limit, then Done (halt)."""
    c = Circuit("Counter", L)
    c.kinds = [TokenKind("Count", (Field("value", width),), L), TokenKind("Done", (), L, halt=True)]
    c.start = Token(0, (0,))
    v = c.add(Op.TOKEN_FIELD, width, param=(0, 0), loc=loc(2), name="v")
    kind = c.add(Op.TOKEN_KIND, 1, loc=loc(3))
    one = c.add(Op.CONST, width, param=1)
    nxt = c.add(Op.ADD, width, (v, one), loc=loc(4), name="nxt")
    lim = c.add(Op.CONST, width, param=limit)
    hit = c.add(Op.EQ, 1, (v, lim), loc=loc(5), name="hit")
    done = c.add(Op.OR, 1, (hit, kind), loc=loc(6))
    c.add(Op.TOKEN_OUT, 0, (done, nxt), loc=loc(7))
    c.check()
    return c


def alu(width: int = 8) -> Circuit:
    """Op(a, b, op) -> Op(r, r ^ a*b, op+1): exercises every ALU op and MUL.

    op (3 bits) selects a+b, a-b, a&b, a|b, a^b, a<<b, a>>b, (a<b)|(a==b)<<1|(a<s b)<<2."""
    c = Circuit("Alu", L)
    W = width
    c.kinds = [TokenKind("Op", (Field("a", W), Field("b", W), Field("op", 3)), L)]
    c.start = Token(0, (5, 3, 0))
    a = c.add(Op.TOKEN_FIELD, W, param=(0, 0), name="a")
    b = c.add(Op.TOKEN_FIELD, W, param=(0, 1), name="b")
    op = c.add(Op.TOKEN_FIELD, 3, param=(0, 2), name="op")
    sh = c.add(Op.SLICE, 3, (b,), param=0)
    shamt = c.add(Op.CONCAT, W, (c.add(Op.CONST, W - 3, param=0), sh)) if W > 3 else b
    r = [c.add(Op.ADD, W, (a, b)), c.add(Op.SUB, W, (a, b)), c.add(Op.AND, W, (a, b)),
         c.add(Op.OR, W, (a, b)), c.add(Op.XOR, W, (a, b)), c.add(Op.SHL, W, (a, shamt)),
         c.add(Op.LSHR, W, (a, shamt))]
    lt = c.add(Op.ULT, 1, (a, b))
    eq = c.add(Op.EQ, 1, (a, b))
    slt = c.add(Op.SLT, 1, (a, b))
    cmp = c.add(Op.CONCAT, W, (c.add(Op.CONST, W - 3, param=0), slt, eq, lt))
    r.append(cmp)
    # mux tree on op bits
    bits = [c.add(Op.SLICE, 1, (op,), param=i) for i in range(3)]
    lvl = r
    for i in range(3):
        lvl = [c.add(Op.MUX, W, (bits[i], lvl[2 * j], lvl[2 * j + 1])) for j in range(len(lvl) // 2)]
    res = lvl[0]
    op1 = c.add(Op.ADD, 3, (op, c.add(Op.CONST, 3, param=1)))
    mixed = c.add(Op.XOR, W, (res, c.add(Op.MUL, W, (a, b))))
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, param=0), res, mixed, op1))
    c.check()
    return c


def ram_circuit(depth: int = 16, width: int = 8, aw: int = 4, transparent: bool = False
                ) -> Circuit:
    """W(addr, data): ram[addr] <= data, answer R(ram[addr] before the write, or with
    ``transparent`` after it); R(x) -> W(x % depth, x + 1)-like chain so every step reads
    and writes."""
    c = Circuit("Ram", L)
    c.kinds = [TokenKind("W", (Field("addr", aw), Field("data", width)), L),
               TokenKind("R", (Field("addr", aw), Field("data", width)), L)]
    c.memories["ram"] = Memory("ram", "ram", width, depth, loc(2),
                               read_under_write="new" if transparent else "old")
    c.start = Token(0, (3, 7))
    kind = c.add(Op.TOKEN_KIND, 1)
    wa = c.add(Op.TOKEN_FIELD, aw, param=(0, 0))
    wd = c.add(Op.TOKEN_FIELD, width, param=(0, 1))
    ra = c.add(Op.TOKEN_FIELD, aw, param=(1, 0))
    rd = c.add(Op.TOKEN_FIELD, width, param=(1, 1))
    addr = c.add(Op.OR, aw, (wa, ra))
    data = c.add(Op.OR, width, (wd, rd))
    if transparent:
        en = c.add(Op.NOT, 1, (kind,))
        old = c.add(Op.MEM_READ, width, (addr, addr, data, en), param="ram", loc=loc(5),
                    name="old")
    else:
        old = c.add(Op.MEM_READ, width, (addr,), param="ram", loc=loc(5), name="old")
        en = c.add(Op.NOT, 1, (kind,))
    c.add(Op.MEM_WRITE, 0, (addr, data, en), param="ram", loc=loc(6))
    # next: W -> R(addr, old) ; R -> W(addr*3+1, old + data)
    a3 = c.add(Op.ADD, aw, (c.add(Op.MUL, aw, (addr, c.add(Op.CONST, aw, param=3))),
                            c.add(Op.CONST, aw, param=1)))
    s = c.add(Op.ADD, width, (old, data))
    na = c.add(Op.MUX, aw, (kind, addr, a3))
    nd = c.add(Op.MUX, width, (kind, old, s))
    nk = c.add(Op.NOT, 1, (kind,))
    c.add(Op.TOKEN_OUT, 0, (nk, na, nd, na, nd))
    c.check()
    return c


def rom_circuit(depth: int = 40, width: int = 12) -> Circuit:
    """Walk(i) -> Walk(table[i] mod depth-ish): a pointer chase through a ROM image; also
    reads a second port at i+1 so two read ports share one image."""
    aw = max(1, (depth - 1).bit_length())
    c = Circuit("Rom", L)
    vw = min(width, 8)
    c.kinds = [TokenKind("Walk", (Field("i", aw), Field("v", vw)), L)]
    img = tuple((i * 2654435761 >> 7) % (1 << width) for i in range(depth))
    c.memories["table"] = Memory("table", "rom", width, depth, loc(2), init=img)
    c.start = Token(0, (1, 0))
    i = c.add(Op.TOKEN_FIELD, aw, param=(0, 0))
    r0 = c.add(Op.MEM_READ, width, (i,), param="table")
    i1 = c.add(Op.ADD, aw, (i, c.add(Op.CONST, aw, param=1)))
    r1 = c.add(Op.MEM_READ, width, (i1,), param="table")
    nxt = c.add(Op.SLICE, aw, (r0,), param=0)
    x = c.add(Op.XOR, width, (r0, r1))
    chunks = [c.add(Op.SLICE, min(vw, width - lo), (x,), param=lo) for lo in range(0, width, vw)]
    v = chunks[0]
    for ch in chunks[1:]:       # fold every bit of the words into the 8-bit field
        w = c.nodes[ch].width
        if w < vw:
            ch = c.add(Op.CONCAT, vw, (c.add(Op.CONST, vw - w, param=0), ch))
        v = c.add(Op.XOR, vw, (v, ch))
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, param=0), nxt, v))
    c.check()
    return c


def self_feeding_ram() -> Circuit:
    """Breaks the depth rule: the data written to ``mem`` is read from ``mem`` this step."""
    c = Circuit("Bad", L)
    c.kinds = [TokenKind("T", (Field("a", 4),), L)]
    c.memories["mem"] = Memory("mem", "ram", 4, 16, loc(2))
    c.start = Token(0, (0,))
    a = c.add(Op.TOKEN_FIELD, 4, param=(0, 0), loc=loc(3), name="a")
    r = c.add(Op.MEM_READ, 4, (a,), param="mem", loc=loc(4), name="old")
    inc = c.add(Op.ADD, 4, (r, c.add(Op.CONST, 4, param=1)), loc=loc(5), name="bumped")
    c.add(Op.MEM_WRITE, 0, (a, inc, c.add(Op.CONST, 1, param=1)), param="mem", loc=loc(6))
    c.add(Op.TOKEN_OUT, 0, (c.add(Op.CONST, 1, param=0), inc), loc=loc(7))
    c.check()
    return c


def config_target(path, hidden: int = 256, inter: int = 96, nk: int = 2, nv: int = 4,
                  dk: int = 128, dv: int | None = None) -> str:
    """Write a small Qwen3.5 text config (the shapes a ``--target CONFIG.json`` reads) to
    ``path`` and return it as a target spec."""
    import json
    cfg = {"text_config": {"hidden_size": hidden, "intermediate_size": inter,
                           "linear_num_key_heads": nk, "linear_num_value_heads": nv,
                           "linear_key_head_dim": dk, "linear_value_head_dim": dv or dk,
                           "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    return str(path)


def transparent_ram_source(seed: int) -> str:
    """HDL of a random circuit around a transparent RAM (depth, width, strides drawn from
    ``seed``; at most 12 token bits): each step writes ``d`` at a when enabled, reads at a
    (so it sees the write) and at a + k, and folds both reads into the next token, so every
    read value reaches the token stream and the addresses wander over the whole RAM."""
    import random
    rng = random.Random(seed)
    depth = rng.choice((3, 16, 64, 130, 256))
    aw = min(8, max(1, (depth - 1).bit_length()) + rng.choice((0, 0, 1)))
    w = rng.randint(1, 12 - aw)
    step, k = rng.randrange(1, 1 << aw, 2), rng.randrange(1, 1 << aw)
    return f"""
circuit tram {{
    token T(a: u{aw}, d: u{w});
    start T(a: 0, d: {rng.randrange(1 << w)});
    ram m: u{w}[{depth}] transparent;
    let a = tok.T.a;
    if tok.T.d[0] ^ a[{aw - 1}] ^ 1'b1 {{ m[a] <= tok.T.d; }}
    let ra = m[a];
    let rb = m[a + {aw}'d{k}];
    next = T(a: a + {aw}'d{step} + zext(rb[0], {aw}), d: ra ^ rb ^ (tok.T.d + {w}'d1));
}}
"""


#: the examples the engine tests compile: source, and a start token other than the
#: circuit's own (None: its own)
EXAMPLES = {"counter": ("examples/counter/counter.hdl", None),
            "gcd": ("examples/gcd/gcd.hdl", "Step a=144 b=233"),
            "stack_machine": ("examples/stack_machine/stack_machine.hdl", None)}
