"""Arithmetic: carry networks for ADD/SUB, multi-operand sums, shifts and
multiplication as column compression.

A part of :class:`backends.compile.lower.Lowerer` (its state: lanes, MLP neurons, bits, memory
plans; see that class)."""
from __future__ import annotations

from typing import Sequence

from hdl.ir import Op
from backends.compile.program import Form, PendingBit, const, lin
from backends.compile.lower.bits import (MAX_SPAN, LoweringError, SHIFT_GROUP, span_groups,
                                         extension)


class Arith:
    """Adders, sums, shifts and multipliers (see the module docstring)."""

    def prefix_pos(self, e: Sequence[Form], idx: Sequence[int], lazy: bool = False,
                   center: bool = False) -> dict[int, "Form | PendingBit"]:
        """For each i in idx: 1 if the sign of the digit string e[i], e[i-1], ..., e[0]
        (digits in {-1, 0, 1}, e[i] most significant) is positive, else 0 (``lazy``: the
        last stage left pending, so a select can fuse it; ``center``: every lane 0 where the
        digits' lanes are, :meth:`fns`)."""
        fn = lambda T, f: self.fn(T, f, center)
        final = self.pending if lazy else fn
        res: dict[int, Form] = {}
        step1 = lambda v: int(v >= 1)
        sign = lambda v: (v > 0) - (v < 0)
        blocks: dict[int, Form] = {}

        def block_sign(b: int) -> Form:
            if b not in blocks:
                blocks[b] = fn(lin([(1 << (j - 8 * b), e[j]) for j in range(8 * b, 8 * b + 8)]), sign)
            return blocks[b]
        q: dict[int, Form] = {}
        for i in idx:
            b = i // 8
            if b == 0:
                res[i] = final(lin([(1 << j, e[j]) for j in range(i + 1)]), step1)
            elif b > 7:
                raise LoweringError(f"{self.loc()}: compare/add wider than 64 bits")
            else:
                q[i] = block_sign(b) if i == 8 * b + 7 else \
                    fn(lin([(1 << (j - 8 * b), e[j]) for j in range(8 * b, i + 1)]), sign)
        for i, qi in q.items():
            b = i // 8
            T = lin([(1 << b, qi)] + [(1 << bb, block_sign(bb)) for bb in range(b)])
            res[i] = final(T, step1)
        return res

    def add_bits(self, a: Sequence[Form], b: Sequence[Form], sub: bool) -> list[Form]:
        """a + b (or a - b = a + ~b + 1), W bits. Bits 0..6 are read straight off the chunk
        sum sum(2^k (a_k + b_k)) + cin (<= 255): one stage. Bits 7..13 likewise from their
        chunk sum plus the carry into bit 7 (one sign-network stage): two stages. Higher bits
        are parity(a_i + b_i + c_i) with c_i from the two-stage carry-sign network."""
        W = len(a)
        bb = [lin([(-1, x)], 1) if sub else x for x in b]
        cin = 1 if sub else 0
        e = [const(1 if sub else -1)] + [lin([(1, a[j]), (1, bb[j])], -1) for j in range(W)]
        if W > 7 and (all(x.hi <= 0 for x in e[1:W]) or all(x.lo >= 0 for x in e[1:W])):
            return self.one_sided_add(a, bb, e)
        want = ([7] if W > 7 else []) + list(range(14, W))
        # a - b: its carries are 1 where b is 0 (no borrow), so their lanes hold the
        # difference from that (the borrows): a datapath whose b is 0 adds nothing
        carries = self.prefix_pos(e, want, center=sub) if want else {}
        out = []
        for i in range(W):
            if i < 14:
                k0 = 0 if i < 7 else 7
                c0: list[tuple[int, Form]] = [(1, carries[7])] if k0 else []
                T = lin([(1 << (k - k0), a[k]) for k in range(k0, i + 1)] +
                        [(1 << (k - k0), bb[k]) for k in range(k0, i + 1)] + c0,
                        cin if k0 == 0 else 0)
                out.append(self.pending(T, lambda v, q=i - k0: (v >> q) & 1))
            else:
                out.append(self.pending(lin([(1, a[i]), (1, bb[i]), (1, carries[i])]),
                                        lambda v: v & 1))
        return out

    def one_sided_add(self, a: Sequence[Form], bb: Sequence[Form], e: Sequence[Form]
                      ) -> list["Form | PendingBit"]:
        """:meth:`add_bits` when no digit e_j (j >= 1) can generate a carry (one side a
        constant 0, as in a negation ~x + 1) or none can kill one: the carry into bit i is
        then [S_i >= 1] with S_i = e_1 + ... + e_i + [e_0 > 0], one sum, and bit i, the
        parity of x_i = a_i + bb_i and that carry, is one function of M * x_i + S_i
        (M > the range of S_i): every bit one stage."""
        c0 = int(e[0].c > 0)
        out = []
        for i in range(len(a)):
            S = lin([(1, x) for x in e[1:i + 1]], c0)
            x = lin([(1, a[i]), (1, bb[i])])
            M = S.hi - S.lo + 1
            T = lin([(M, x), (1, S)], -S.lo)
            out.append(self.pending(T, lambda v, M=M, lo=S.lo: (v // M + (v % M + lo >= 1)) & 1))
        return out

    def add_terms(self, nid: int, sign: int) -> list[tuple[int, int]]:
        """The (sign, node) operands of the chain of adds and subtracts rooted at ``nid``
        (inner ones absorbed: read by this chain only, same width)."""
        out = []
        stack = [(nid, sign)]       # iterative: a chain may be 100,000 adds long
        while stack:
            node, s = stack.pop()
            if node != nid and node not in self.absorbed:
                out.append((s, node))
                continue
            n = self.c.nodes[node]
            for k in reversed(range(len(n.args))):      # left to right, as they come off
                stack.append((n.args[k], s if (n.op is Op.ADD or k == 0) else -s))
        return out

    def multi_add(self, terms: list[tuple[int, int]], W: int) -> list[Form]:
        """sum of sign * operand mod 2^W (carry-save: -x is ~x + 1; the columns are
        compressed to two rows, then one adder)."""
        cols: list[list[Form]] = [[] for _ in range(W)]
        neg = 0
        for sign, a in terms:
            bits = [self.mat(x) for x in self.bits[a]]
            for i, x in enumerate(bits):
                y = x if sign > 0 else lin([(-1, x)], 1)
                if not (y.is_const and y.c == 0):
                    cols[i].append(y)
            neg += sign < 0
        for i in range(W):
            if (neg >> i) & 1:
                cols[i].append(const(1))
        return self.sum_columns(cols)

    def shift_bits(self, op: Op, a: Sequence[Form], amt: Sequence[Form]) -> list[Form]:
        """A variable shift as one-hot selection: the amount bits that shift within the
        width are cut into groups of at most :data:`SHIFT_GROUP` bits (one stage each: W = 32
        is one stage, 64 two); in a group, output bit i is sum over the group's values k of
        relu(src(i, k) + [amount bits == k] - H), where H (the sum of the amount bits worth
        >= W) switches every term off in the first group (ASHR then selects the sign)."""
        W = len(a)
        fill = a[-1] if op is Op.ASHR else const(0)
        if all(x.is_const for x in amt):
            k = sum(x.c << i for i, x in enumerate(amt))
            if op is Op.SHL:
                return [a[i - k] if 0 <= i - k < W else const(0) for i in range(W)]
            return [a[i + k] if i + k < W else fill for i in range(W)]
        low = [i for i in range(len(amt)) if (1 << i) < W]
        high = [amt[i] for i in range(len(amt)) if (1 << i) >= W]
        H = lin([(1, x) for x in high]) if high else None
        if H is not None and H.is_const:
            if H.c:
                return [fill] * W if op is Op.ASHR else [const(0)] * W
            H = None
        if not low:                      # W == 1: only the overflow test remains
            if H is None or op is Op.ASHR:
                return list(a)
            return [self.relu_sum([(lin([(1, a[0]), (-1, H)]), 1)], 0, 1)]
        ng = -(-len(low) // SHIFT_GROUP)
        groups = [low[g * len(low) // ng:(g + 1) * len(low) // ng] for g in range(ng)]
        cur = list(a)
        for gi, grp in enumerate(groups):
            hh = [(-1, H)] if H is not None and gi == 0 else []
            nxt = []
            for i in range(W):
                terms = []
                for k in range(1 << len(grp)):
                    d = sum(((k >> j) & 1) << b for j, b in enumerate(grp))
                    j = i - d if op is Op.SHL else i + d
                    src = cur[j] if 0 <= j < W else (fill if op is not Op.SHL else const(0))
                    if src.is_const and src.c == 0:
                        continue
                    match = [(1, amt[b]) if (k >> q) & 1 else (-1, amt[b])
                             for q, b in enumerate(grp)]
                    nzero = sum(1 for q in range(len(grp)) if not (k >> q) & 1)
                    terms.append((lin([(1, src)] + match + hh, nzero - len(grp)), 1))
                if hh and op is Op.ASHR:     # amount >= W: the sign, whatever the low bits
                    M = H.hi
                    terms += [(lin([(1, H), (M, fill)], -M), 1),
                              (lin([(1, H), (M, fill)], -M - 1), -1)]
                nxt.append(self.relu_sum(terms, 0, 1))
            cur = nxt
        return cur

    def mul_bits(self, a: Sequence[object], b: Sequence[object]) -> list[Form]:
        """Low W bits of a*b: partial-product ANDs (one stage), column compression
        (:meth:`compress`), then one adder. An operand bit still pending (a sign extension
        chosen by a select is an AND) joins each of its partial products' ANDs
        (:meth:`sym`), so it costs no stage of its own."""
        W = len(a)
        cols: list[list[Form]] = [[] for _ in range(W)]
        h = W // 2
        ea, eb = extension(a), extension(b)
        if ea is not None and eb is not None:
            # both operands sign- (or zero-) extend their lower halves: x = x_lo - e_x 2^h
            # (mod 2^W), so a*b = a_lo*b_lo - 2^h (e_a b_lo + e_b a_lo): h*h partial products
            # and two rows -e v 2^h = e (~v + 1) 2^h (mod 2^W: e 2^W is 0), each bit an AND
            # with e, so that a row is all 0 where e is (an unsigned or idle multiply: its
            # lanes add nothing there), not its complement (W*W/2 products before)
            for e, v in ((ea, b), (eb, a)):
                if isinstance(e, Form) and e.is_const and e.c == 0:
                    continue
                for j in range(h):
                    cols[h + j].append(self.mat(self.sym("and", (e, self.negate(v[j])))))
                cols[h].append(self.mat(e))
            a, b = a[:h], b[:h]
        for j in range(len(b)):
            for i in range(min(len(a), W - j)):
                p = self.mat(self.sym("and", (a[i], b[j])))
                if not (p.is_const and p.c == 0):
                    cols[i + j].append(p)
        return self.sum_columns(cols)

    def sum_columns(self, cols: list[list[Form]]) -> list[Form]:
        """The low len(cols) bits of sum over k of 2^k * sum(cols[k]) (entries are bits or
        constants): :meth:`compress` to two rows, then one adder."""
        cols = self.compress(cols)
        r0 = [col[0] if col else const(0) for col in cols]
        r1 = [col[1] if len(col) > 1 else const(0) for col in cols]
        if all(x.is_const and x.c == 0 for x in r1):
            return r0
        return self.add_bits(r0, r1, False)

    def compress(self, cols: list[list[Form]]) -> list[list[Form]]:
        """Columns of bits -> columns of at most two bits with the same weighted sum (mod
        2^len(cols)). One stage per round: the columns are cut into blocks of b adjacent
        columns, each block's weighted sum T = sum 2^(c-k) * col[c] (<= 255) is written
        out in binary (shared neurons relu(T - v)), bit q going to column k + q. With h rows,
        b is chosen so that ceil(bits(h * (2^b - 1)) / b) is smallest: 3 rows -> 2, 4 -> 2,
        8 -> 2 (b = 3), 32 -> 3 -> 2."""
        W = len(cols)
        for _ in range(32):
            h = max(len(col) for col in cols)
            if h <= 2:
                break
            best = None
            for bw in range(1, 9):
                top = h * ((1 << bw) - 1)
                if top > MAX_SPAN:
                    break
                rows = -(-top.bit_length() // bw)
                if best is None or rows < best[0]:
                    best = (rows, bw)
            bw = best[1] if best else 1
            new: list[list[Form]] = [[] for _ in range(W)]
            for k in range(0, W, bw):
                blk = range(k, min(W, k + bw))
                if sum(len(cols[c]) for c in blk) <= 1:
                    for c in blk:
                        new[c].extend(cols[c])
                    continue
                # a block taller than one neuron's span (a column of 2,000 bits) is summed
                # in groups of at most MAX_SPAN, each written out in binary
                for group in span_groups([(1 << (c - k), x) for c in blk for x in cols[c]]):
                    T = lin(group)
                    if T.is_const:
                        outs = [const((T.c >> q) & 1) for q in range(max(1, T.c.bit_length()))]
                    else:
                        nb = max(1, T.hi.bit_length())
                        outs = self.fns(T, [lambda v, q=q: (v >> q) & 1 for q in range(nb)])
                    for q, o in enumerate(outs):
                        if k + q < W and not (o.is_const and o.c == 0):
                            new[k + q].append(o)
            cols = new
        if max(len(col) for col in cols) > 2:
            raise LoweringError(f"{self.loc()}: internal: columns not compressed to two rows")
        return cols
