"""Expected outputs of the benchmark programs (firmware/programs/crc32c.c, sha256.c,
aes128.c, matrix.c, softfloat.c), computed here in Python independently of the C code:
hashlib for SHA-256, a table-driven CRC-32C, an AES-128 whose S-box is found by brute-force
inversion in GF(2^8), numpy for the matrices and for float32 rounding."""
from __future__ import annotations

import hashlib
import struct

import numpy as np


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), table-driven (the C program goes bit by bit)."""
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _lcg_bytes(seed: int, n: int) -> bytes:
    x, out = seed, bytearray()
    for _ in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append((x >> 16) & 0xFF)
    return bytes(out)


def crc32c_expected() -> str:
    return f"{crc32c(b'123456789'):08x}\n{crc32c(_lcg_bytes(2024, 512)):08x}\n"


SHA_TWO_BLOCKS = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"


def sha256_expected() -> str:
    msgs = [b"abc", SHA_TWO_BLOCKS, bytes((7 * i + 3) & 0xFF for i in range(200))]
    return "".join(hashlib.sha256(m).hexdigest() + "\n" for m in msgs)


# ---------------------------------------------------------------- AES-128

def _gmul(a: int, b: int) -> int:
    p = 0
    for _ in range(8):
        if b & 1:
            p ^= a
        a = ((a << 1) ^ 0x11B) if a & 0x80 else a << 1
        b >>= 1
    return p


def _sbox() -> list[int]:
    inv = [0] * 256
    for a in range(1, 256):
        inv[a] = next(b for b in range(1, 256) if _gmul(a, b) == 1)
    box = []
    for a in range(256):
        b = inv[a]
        s = 0x63
        for i in range(8):        # affine map: bit i = b_i ^ b_{i+4} ^ b_{i+5} ^ b_{i+6} ^ b_{i+7}
            bit = (b >> i ^ b >> (i + 4) % 8 ^ b >> (i + 5) % 8 ^ b >> (i + 6) % 8
                   ^ b >> (i + 7) % 8) & 1
            s ^= bit << i
        box.append(s)
    return box


class AES128:
    def __init__(self, key: bytes):
        self.sbox = _sbox()
        words = [list(key[4 * i:4 * i + 4]) for i in range(4)]
        rcon = 1
        for i in range(4, 44):
            t = list(words[i - 1])
            if i % 4 == 0:
                t = [self.sbox[v] for v in t[1:] + t[:1]]
                t[0] ^= rcon
                rcon = _gmul(rcon, 2)
            words.append([x ^ y for x, y in zip(words[i - 4], t)])
        self.keys = [sum(words[4 * r:4 * r + 4], []) for r in range(11)]

    def encrypt(self, block: bytes) -> bytes:
        # state[r][c] = byte 4c + r
        st = [[block[4 * c + r] ^ self.keys[0][4 * c + r] for c in range(4)] for r in range(4)]
        for rnd in range(1, 11):
            st = [[self.sbox[v] for v in row] for row in st]
            st = [row[r:] + row[:r] for r, row in enumerate(st)]
            if rnd < 10:
                cols = [[st[r][c] for r in range(4)] for c in range(4)]
                mixed = [[_gmul(col[r], 2) ^ _gmul(col[(r + 1) % 4], 3) ^ col[(r + 2) % 4]
                          ^ col[(r + 3) % 4] for r in range(4)] for col in cols]
                st = [[mixed[c][r] for c in range(4)] for r in range(4)]
            st = [[st[r][c] ^ self.keys[rnd][4 * c + r] for c in range(4)] for r in range(4)]
        return bytes(st[r][c] for c in range(4) for r in range(4))


def aes128_expected() -> str:
    aes = AES128(bytes(range(16)))
    lines = [aes.encrypt(bytes(0x11 * i for i in range(16))).hex()]
    chain = bytes(range(15, -1, -1))
    plain = bytes(range(64))
    for j in range(4):
        chain = aes.encrypt(bytes(a ^ b for a, b in zip(chain, plain[16 * j:16 * j + 16])))
        lines.append(chain.hex())
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- matrices

def matrix_expected() -> str:
    n, s = 16, 7
    a = np.zeros((n, n), dtype=np.int64)
    b = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            s = (s * 1103515245 + 12345) & 0xFFFFFFFF
            a[i, j] = (s >> 16) % 2000 - 1000
            s = (s * 1103515245 + 12345) & 0xFFFFFFFF
            b[i, j] = (s >> 16) % 2000 - 1000
    # Exact products in Python integers (object arrays), then reduced mod 2^32 as the C does.
    c = (a.astype(object) @ b.astype(object)) % (1 << 32)
    d = (c.astype(object) @ a.astype(object)) % (1 << 32)

    def signed(v: int) -> int:
        return v - (1 << 32) if v >= 1 << 31 else v
    trace = sum(c[i, i] for i in range(n)) % (1 << 32)
    checksum = sum((n * i + j + 1) * d[i, j] for i in range(n) for j in range(n)) % (1 << 32)
    return f"trace {signed(trace)} checksum {checksum:08x} last {signed(d[n - 1, n - 1])}\n"


# ---------------------------------------------------------------- soft float

def _dbits(x: float) -> str:
    return struct.pack(">d", x).hex()


def softfloat_expected() -> str:
    lines = []
    x = 1.0
    for _ in range(6):
        x = (x + 2.0 / x) / 2.0
    lines.append(f"sqrt2 {int(x * 1e9)} {_dbits(x)}")
    e = fact = 1.0
    for k in range(1, 18):
        fact *= k
        e += 1.0 / fact
    lines.append(f"e {int(e * 1e9)} {_dbits(e)}")
    f32 = np.float32
    total, sign = f32(0.0), f32(1.0)
    for k in range(300):
        total = f32(total + sign / f32(2 * k + 1))
        sign = -sign
    pi = f32(f32(4.0) * total)
    lines.append(f"pi {int(f32(pi * f32(1e6)))} {struct.pack('>f', pi).hex()}")
    basel = 0.0
    for k in range(1, 101):
        basel += 1.0 / (float(k) * float(k))
    lines.append(f"basel {int(basel * 1e9)} {_dbits(basel)}")
    r, steps = 2.0, 0
    while True:
        step = (r * r * r - 2.0 * r - 5.0) / (3.0 * r * r - 2.0)
        r -= step
        steps += 1
        if not (abs(step) > 1e-15 and steps < 50):
            break
    lines.append(f"root {int(r * 1e9)} {_dbits(r)}")
    lines.append(f"steps {steps}")
    return "\n".join(lines) + "\n"


EXPECTED = {
    "crc32c": crc32c_expected(),
    "sha256": sha256_expected(),
    "aes128": aes128_expected(),
    "matrix": matrix_expected(),
    "softfloat": softfloat_expected(),
}
