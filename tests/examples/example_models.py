"""Independent Python models of the example circuits (examples/*/), at the token level.

Each model takes the start state (and, for the stack machine, the ROM words) and returns the
token stream as ``deltachip sim`` prints it: one ``"Kind field=value ..."`` string per token,
the start token first, ending with the first halt token (or after ``steps`` steps).
They are written from the examples' READMEs, not from the .hdl, so a slip in either shows.
"""
from __future__ import annotations

# The stack machine's opcodes (examples/stack_machine/README.md).
HALT, PUSH, DUP, OVER, DROP, ADD, SUB, AND, LT, LOAD, STORE, JMP, JZ, JNZ, OUT = range(15)


def counter(last: int = 9) -> list[str]:
    """Count value=0 .. value=last, then Done."""
    return [f"Count value={v}" for v in range(last + 1)] + ["Done"]


def gcd(a: int, b: int) -> list[str]:
    """Step(a, b) -> Step(b, a % b) ... until b == 0, then Result(a)."""
    toks = []
    while b:
        toks.append(f"Step a={a} b={b}")
        a, b = b, a % b
    toks.append(f"Step a={a} b=0")
    toks.append(f"Result value={a}")
    return toks


def stack_machine(words: list[int], steps: int = 10_000) -> list[str]:
    """The token stream of the stack machine running ``words`` from Run(pc=0, sp=0).

    State: stack u8[64], vars u8[16] (reads past the end give 0, writes past the end are
    dropped), saved_pc; pc wraps at 256 and sp (6 bits) at 64. One step per token, as the
    README tells it.
    """
    prog = list(words) + [0] * (256 - len(words))
    stack, vars_, saved = [0] * 64, [0] * 16, 0

    def read(mem: list[int], addr: int) -> int:
        return mem[addr] if addr < len(mem) else 0

    def write(mem: list[int], addr: int, value: int) -> None:
        if addr < len(mem):
            mem[addr] = value & 0xFF

    tok: tuple = ("Run", 0, 0)
    stream = []
    for _ in range(steps + 1):
        kind = tok[0]
        stream.append({"Run": "Run pc={} sp={}", "Put": "Put value={} sp={}",
                       "Out": "Out value={} sp={}", "Fault": "Fault pc={}",
                       "Halt": "Halt"}[kind].format(*tok[1:]))
        if kind in ("Halt", "Fault"):
            break
        if kind == "Run":
            _, pc, sp = tok
            op, arg = prog[pc] >> 8, prog[pc] & 0xFF
            top, second = stack[(sp - 1) % 64], stack[(sp - 2) % 64]
            nxt, down, up = (pc + 1) % 256, (sp - 1) % 64, (sp + 1) % 64
            saved = nxt
            binary = {ADD: second + top, SUB: second - top, AND: second & top,
                      LT: int(second < top)}
            if op == HALT:
                tok = ("Halt",)
            elif op in (PUSH, DUP, OVER, LOAD):
                value = {PUSH: arg, DUP: top, OVER: second, LOAD: read(vars_, arg)}[op]
                tok = ("Put", value, up)
            elif op in binary:
                tok = ("Put", binary[op] % 256, down)
            elif op == DROP:
                tok = ("Run", nxt, down)
            elif op == STORE:
                write(vars_, arg, top)
                tok = ("Run", nxt, down)
            elif op == JMP:
                tok = ("Run", arg, sp)
            elif op in (JZ, JNZ):
                taken = (top == 0) == (op == JZ)
                tok = ("Run", arg if taken else nxt, down)
            elif op == OUT:
                tok = ("Out", top, down)
            else:
                tok = ("Fault", pc)
        elif kind == "Put":
            _, value, sp = tok
            stack[(sp - 1) % 64] = value
            tok = ("Run", saved, sp)
        else:  # Out
            tok = ("Run", saved, tok[2])
    return stream


def printed(stream: list[str]) -> list[int]:
    """The values of the Out tokens of a stack-machine stream."""
    return [int(t.split()[1][6:]) for t in stream if t.startswith("Out ")]
