"""The shipped programs the benchmarks run (benchmarks/fast_engine.py, result_widths.py)."""

#: (label, program, input, the fastest public peer's wall seconds on a CPU like ours: a WASM
#: interpreter compiled into a 7-layer transformer with a sparse C++ engine; None: not given)
PROGRAMS = [("sum 1..100", "sum", None, 0.15),
            ("fibonacci to 102,334,155", "fibonacci", None, 0.95),
            ("12345 x 6789 by addition", "multiply", None, 6.25),
            ("primes below 20,000", "sieve", None, 68.0),
            ("calc 2**100", "calc", b"2**100", None),
            # the benchmark programs of issue 41 (no published peer figures)
            ("CRC-32C bitwise, 521 bytes", "crc32c", None, None),
            ("SHA-256 of 3 messages", "sha256", None, None),
            ("AES-128, 5 blocks", "aes128", None, None),
            ("16x16 int32 matmul x2", "matrix", None, None),
            ("soft-float series, Newton", "softfloat", None, None)]
