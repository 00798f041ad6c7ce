"""MicroPython on the core (firmware/micropython): small Python programs whose expected
output is CPython's, each run here with ``sys.executable`` on the same source.

Default run: the whole set on the golden emulator (``ref``); ``print(2**100)`` on the fast
engine (the compiled core, compact shapes) with ref's exact output, exit code and
instruction count; the shortest program on the circuit simulator (``sim``). Errors: an uncaught exception exits 1 with MicroPython's traceback on the UART,
``sys.exit(n)`` exits n, a runaway loop ends at the step budget with the run's message.
Tool calls (an empty input buffer: the python tool's calls read from the UART, on ref):
JSON, XML and plain calls sharing one interpreter, a call as text tokens, every error line.
Slow: three more programs on fast (up to 0.9 M instructions each). The build itself is checked from a clean cache folder
(``DELTACHIP_CACHE`` pointed at a new one) in the slow set.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cpu.emulator import Machine
from deltachip.cli import main as cli
from firmware.micropython import build as mp_build

VENDOR = mp_build.picolibc.REPO_ROOT.parent / "shared" / "vendor" / mp_build.TARBALL_NAME
pytestmark = pytest.mark.skipif(
    not VENDOR.is_file() and not os.environ.get("DELTACHIP_MICROPYTHON"),
    reason=f"MicroPython's source: neither {VENDOR} nor DELTACHIP_MICROPYTHON (the build "
           "would download it)")

MAX_STEPS = 20_000_000

#: name -> Python source; each prints what CPython prints (no dict or set order, no
#: floats halfway between two printed values, no exception message texts: the places
#: where MicroPython differs, docs/firmware.md "MicroPython")
PROGRAMS: dict[str, str] = {
    "hello": "print('hi', 6 * 7)\n",
    "pow": "print(2**100)\n",
    "integers": """
        print(2**100, 3**50 // 7**10, -7 // 2, -7 % 3, divmod(10**20, 7))
        print(pow(3, 100, 1000007), abs(-2**70), int('9' * 30) + 1, 10**18 * 10**18)
        print(hex(255), bin(10), oct(8), 0x7fffffff + 1, (-2)**31 - 1, 1 << 100 >> 98)
        x = 1
        for i in range(1, 31):
            x *= i
        print(x, len(str(2**1000)), sum(int(c) for c in str(2**1000)), x % 1000003)
        print(int('-123'), int('ff', 16), (2**64 - 1) & 0xffff0000, 5 ^ 3, ~7, True + 1)
    """,
    "floats": """
        import math
        print(0.1 + 0.2, 1/3, 2.5 * 4, 7 / 2, 1e10, 1.5e-5, 2.0**-10, -0.0)
        print(math.sqrt(2), math.pi, math.e, math.floor(2.7), math.ceil(-2.5))
        print(float('1.25'), int(3.99), int(-3.99), round(3.7), 2**0.5, 10 / 4)
        print(math.fabs(-2.5), math.trunc(-2.5), 7.5 // 2, 7.5 % 2, math.isnan(float('nan')))
        print(max(1.5, 2), min(-1, -1.5), float(2**53), 1e300 * 1e10, abs(-1e-300))
        print('%.3f %.2e %g' % (math.pi, 12345.678, 0.0001))
    """,
    "strings": """
        s = 'Hello, World'
        print(s.lower(), s.upper(), ''.join(reversed(s)), s[2:5], s.find('o'), s.count('l'))
        print(s.replace('l', 'L'), s.split(', '), '-'.join(['a', 'b', 'c']), len(s))
        print(s.startswith('He'), s.endswith('x'), 'lo' in s, s.index('W'), ord('A'), chr(98))
        print(f'{42:5d}|{3.14159:.2f}|{"x":>4}|{255:#x}|{7:03d}', '%s=%d' % ('n', 5))
        print('{} and {}'.format('a', 'b'), '{1}{0}'.format('x', 'y'), ' pad '.strip() + '!')
        print(repr('q"uote\\''), str(b'bytes'), b'ab' * 2, bytes([72, 105]).decode())
        print('a,b,,c'.split(','), 'x y  z'.split(), 'abc'.isalpha(), '42'.isdigit())
        words = 'the quick brown fox jumps over the lazy dog'.split()
        print(sorted(words), max(words, key=len), ' '.join(w[0].upper() + w[1:] for w in words[:3]))
    """,
    "comprehensions": """
        squares = [i * i for i in range(10)]
        evens = [x for x in squares if x % 2 == 0]
        pairs = [(a, b) for a in range(3) for b in range(a)]
        table = {n: n ** 3 for n in range(5)}
        print(squares, evens, pairs)
        print(sorted(table.items()), sorted({c for c in 'mississippi'}))
        print(sum(x for x in range(100) if x % 3 == 0), list(map(abs, [-1, 2, -3])))
        print(list(zip('abc', range(3))), list(enumerate('xy', 1)), list(filter(None, [0, 1, 2])))
        matrix = [[r * 3 + c for c in range(3)] for r in range(3)]
        print(matrix, [list(col) for col in zip(*matrix)], any(x > 7 for x in squares))
    """,
    "dicts": """
        text = 'a b c a b a d'
        counts = {}
        for w in text.split():
            counts[w] = counts.get(w, 0) + 1
        print(sorted(counts.items()), len(counts), 'a' in counts, counts['a'])
        d = dict(x=1, y=2)
        d.update({'z': 3})
        d.setdefault('w', 0)
        del d['x']
        print(sorted(d), sorted(d.values()), d.pop('y'), d.get('nope', -1))
        inv = {v: k for k, v in d.items()}
        print(sorted(inv.items()), list(sorted({3: 'c', 1: 'a'}.keys())))
        nested = {'k': [1, 2, {'deep': (3, 4)}]}
        print(nested['k'][2]['deep'][1], nested)
    """,
    "exceptions": """
        class AppError(Exception):
            pass

        def risky(n):
            if n == 0:
                raise AppError('zero', n)
            return 10 // n

        for n in (2, 0, 'x'):
            try:
                print('ok', risky(n))
            except AppError as e:
                print('app', e.args)
            except TypeError:
                print('type error')
            else:
                print('else ran')
            finally:
                print('finally', n)
        try:
            try:
                [][1]
            except IndexError:
                raise ValueError('wrapped')
        except ValueError as e:
            print(type(e).__name__, e)
        try:
            {}['k']
        except KeyError as e:
            print('key', e.args)
        print(isinstance(AppError(), Exception), issubclass(KeyError, LookupError))
    """,
    "classes": """
        class Shape:
            sides = 0
            def __init__(self, name):
                self.name = name
            def __str__(self):
                return '%s(%d sides, area %s)' % (self.name, self.sides, self.area())

        class Rect(Shape):
            sides = 4
            def __init__(self, w, h):
                super().__init__('rect')
                self.w, self.h = w, h
            def area(self):
                return self.w * self.h
            def __lt__(self, other):
                return self.area() < other.area()
            def __eq__(self, other):
                return self.area() == other.area()

        class Square(Rect):
            def __init__(self, s):
                super().__init__(s, s)
                self.name = 'square'
            @property
            def side(self):
                return self.w
            @staticmethod
            def unit():
                return Square(1)
            @classmethod
            def make(cls, s):
                return cls(s)

        shapes = [Rect(2, 3), Square(2), Square.unit(), Square.make(3)]
        for s in sorted(shapes):
            print(s)
        print(Rect(2, 2) == Square(2), Square(5).side, isinstance(Square(1), Shape))
    """,
    "recursion": """
        def fib(n, memo={}):
            if n < 2:
                return n
            if n not in memo:
                memo[n] = fib(n - 1) + fib(n - 2)
            return memo[n]

        def hanoi(n, a='A', b='B', c='C'):
            return 0 if n == 0 else hanoi(n - 1, a, c, b) + 1 + hanoi(n - 1, c, b, a)

        def ackermann(m, n):
            if m == 0:
                return n + 1
            if n == 0:
                return ackermann(m - 1, 1)
            return ackermann(m - 1, ackermann(m, n - 1))

        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)

        print(fib(90), hanoi(10), ackermann(2, 3), depth(100))
        print([fib(i) for i in range(15)])
    """,
    "generators": """
        def count_up(n):
            i = 0
            while i < n:
                yield i
                i += 1

        def chain(*its):
            for it in its:
                yield from it

        def primes():
            found = []
            n = 2
            while True:
                if all(n % p for p in found):
                    found.append(n)
                    yield n
                n += 1

        g = primes()
        print([next(g) for _ in range(15)])
        print(list(chain(count_up(3), 'ab', (x * 2 for x in range(3)))))
        def acc():
            total = 0
            while True:
                x = yield total
                total += x
        a = acc()
        next(a)
        print([a.send(v) for v in (5, 10, 20)], sum(count_up(101)))
        it = iter([1, 2])
        print(next(it), next(it), next(it, 'done'))
    """,
}

#: run on the fast engine in the default run (55,000 instructions: 30 s on an idle core)
FAST_DEFAULT = ["pow"]
#: on the fast engine in the slow run (0.06, 0.9 and 0.8 M instructions)
FAST_SLOW = ["hello", "dicts", "exceptions"]


def cpython(src: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                          timeout=60)


def source(name: str) -> str:
    return textwrap.dedent(PROGRAMS[name]).lstrip("\n")


@pytest.fixture(scope="module")
def mp_elf(tmp_path_factory) -> Path:
    return mp_build.build(tmp_path_factory.mktemp("micropython") / "mp.elf")


def run_ref(elf: Path, src: str, max_steps: int = MAX_STEPS):
    m = Machine.from_elf(elf, src.encode())
    return m.run(max_steps)


def test_the_test_programs_fit_the_input_buffer():
    for name in PROGRAMS:
        assert len(source(name).encode()) < 1024, name


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_matches_cpython_on_ref(mp_elf, name):
    src = source(name)
    want = cpython(src)
    assert want.returncode == 0, want.stderr
    r = run_ref(mp_elf, src)
    assert r.fault is None and not r.timed_out, (r.fault, r.timed_out)
    assert r.output.decode() == want.stdout
    assert r.exit_code == 0


def test_uncaught_exception_prints_the_traceback_and_exits_1(mp_elf):
    src = "def f(x):\n    return 1 // x\nprint('before')\nf(0)\nprint('after')\n"
    want = cpython(src)
    r = run_ref(mp_elf, src)
    out = r.output.decode()
    assert r.exit_code == want.returncode == 1
    assert out.startswith(want.stdout) and want.stdout == "before\n"
    tail = out[len(want.stdout):]
    assert tail.startswith("Traceback (most recent call last):\n")
    assert '  File "<stdin>", line 4, in <module>\n' in tail
    assert '  File "<stdin>", line 2, in f\n' in tail
    # the exception's type as CPython names it (MicroPython's message is its own)
    assert tail.splitlines()[-1].split(":")[0] == want.stderr.splitlines()[-1].split(":")[0]
    assert "after" not in out


def test_syntax_error_and_name_error(mp_elf):
    r = run_ref(mp_elf, "print(1\n")
    assert r.exit_code == 1 and b"SyntaxError" in r.output
    r = run_ref(mp_elf, "print(undefined_name)\n")
    assert r.exit_code == 1 and b"NameError: name 'undefined_name' isn't defined" in r.output


def test_sys_exit_codes(mp_elf):
    for src, code, out in (("import sys\nprint('x')\nsys.exit(7)\n", 7, "x\n"),
                           ("import sys\nsys.exit()\n", 0, ""),
                           ("raise SystemExit('bye')\n", 1, "bye\n")):
        assert cpython(src).returncode == code
        r = run_ref(mp_elf, src)
        assert (r.exit_code, r.output.decode()) == (code, out), src


def test_endless_recursion_is_a_python_error_not_a_fault(mp_elf):
    """Python calls do not recurse in C: their frames go on the Python stack (6 KiB, about
    125 calls deep); a call that does not fit raises RuntimeError, caught like any
    exception; a depth of 100 works."""
    src = ("def down(n):\n    return down(n + 1)\ntry:\n    down(0)\nexcept RuntimeError as e:\n"
           "    print('caught', type(e).__name__)\n")
    assert cpython(src).stdout == "caught RecursionError\n"     # a RuntimeError in CPython
    r = run_ref(mp_elf, src)
    assert r.fault is None and r.exit_code == 0
    assert r.output == b"caught RuntimeError\n"


def test_memory_error_when_the_heap_is_full(mp_elf):
    src = "try:\n    x = [0] * 100000\nexcept MemoryError:\n    print('no room')\n"
    r = run_ref(mp_elf, src)
    assert (r.exit_code, r.output) == (0, b"no room\n")


def test_heap_size_as_documented(mp_elf):
    """docs/firmware.md, "MicroPython": the GC heap is the 18,304 bytes of RAM left."""
    r = run_ref(mp_elf, "import micropython\nmicropython.mem_info()\n")
    assert r.exit_code == 0 and b"GC: total: 18304," in r.output, r.output


def test_empty_program(mp_elf):
    r = run_ref(mp_elf, "")
    assert (r.exit_code, r.output, r.fault) == (0, b"", None)


# ---- tool calls (the python tool of a merged model; tests/merge/test_python_tool.py) ----

def serve(elf: Path, *calls: bytes, text: list[bytes] | None = None):
    """A run with an empty input buffer serving ``calls`` from the UART (each ended by a
    0 byte), or one call as text tokens (``text``)."""
    m = Machine.from_elf(elf)
    m.rx = b"".join(c + b"\0" for c in calls)
    if text is not None:
        m.text = text
    return m.run(MAX_STEPS)


def test_tool_calls_share_one_interpreter(mp_elf):
    """JSON, XML and plain calls in one run: each call's code runs in the module of the calls
    before it (names, functions, classes and imports stay), its output is what it prints;
    an exception's traceback is a call's answer and the next call goes on; JSON escapes
    (\\n, \\", \\u with surrogate pairs) are decoded; the run ends at an empty call, exit 0."""
    import json
    calls = [json.dumps({"name": "python", "arguments": {"code": "import math\nx = 7\n"
                         "def sq(n):\n    return n * n\nprint('a\"b', '\u00e9\u20ac\U0001F600')"}}),
             "<function=python>\n<parameter=code>\nprint(sq(x), math.factorial(x) < 2**x)\n"
             "</parameter>\n</function>",
             '{"arguments": {"code": "y = x / 0"}, "name": "python"}',
             "print(x, 'y' in globals())"]
    r = serve(mp_elf, *(c.encode() for c in calls))
    assert (r.exit_code, r.fault) == (0, None)
    assert r.output.decode() == (
        'a"b \u00e9\u20ac\U0001F600\n49 False\nTraceback (most recent call last):\n'
        '  File "<stdin>", line 1, in <module>\nZeroDivisionError: divide by zero\n7 False\n')


def test_a_call_as_text_tokens(mp_elf):
    r = serve(mp_elf, text=[b'{"name": "python", "arguments":', b' {"code": "print(6', b'*7)"}}'])
    assert (r.exit_code, r.output) == (0, b"42\n")


MALFORMED = [
    ('{"name": "calc", "arguments": {"expression": "1"}}',
     'error: unknown tool "calc" (this computer has python)'),
    ('{"arguments": {"code": "1"}}', 'error: the call names no tool ("name": "python")'),
    ('{"name": "python"}', 'error: the call has no "arguments": {"code": "..."}'),
    ('{"name": "python", "arguments": {"cod": "1"}}', "error: the call gives no code"),
    ('{"name": "python", "arguments": {"code": "\\q"}}',
     "error: the call is not JSON: a bad escape"),
    ('{"name": "python", "arguments": {"code": "1"}} x',
     "error: the call is not JSON: text after the object"),
    ("<function=python>\n<parameter=cod>\n1\n</parameter>\n</function>",
     'error: unknown parameter "cod" for python (it takes "code")'),
    ("<function=python>\n<parameter=code>\n1\n</function>",
     "error: the call is malformed: a <parameter=...> has no </parameter>"),
    ("<function=python>\n<parameter=code>\n1\n</parameter>",
     "error: the call is malformed: </function> is missing"),
    ("x" * 1024, "error: the call is longer than 1023 bytes"),
]


def test_a_malformed_call_is_answered_with_an_error(mp_elf):
    """A call that is not one gets one error line (golden), and the next call still runs:
    all of them, each followed by a good call, in one run."""
    calls = [c for call, _ in MALFORMED for c in (call.encode(), b"print(1)")]
    r = serve(mp_elf, *calls)
    assert (r.exit_code, r.fault) == (0, None)
    assert r.output.decode().split("\n")[:-1] == [x for _, want in MALFORMED
                                                  for x in (want, "1")]


def test_cli_input_and_stdin(mp_elf, capsys):
    assert cli(["run", str(mp_elf), "--input", "print(2**100)"]) == 0
    assert capsys.readouterr().out == f"{2**100}\n"
    p = subprocess.run([sys.executable, "-m", "deltachip", "run", str(mp_elf)],
                       input="for i in range(3):\n    print(i)\n", capture_output=True,
                       text=True, timeout=300)
    assert (p.returncode, p.stdout) == (0, "0\n1\n2\n"), p.stderr


def test_runaway_loop_ends_at_the_step_budget(mp_elf, capsys):
    status = cli(["run", str(mp_elf), "--input", "while True:\n    pass\n", "--max-steps", "200000"])
    err = capsys.readouterr().err
    assert status == 124
    assert "step budget exhausted: 200,000 instructions without exit" in err


def test_cli_builds_micropython(tmp_path, capsys):
    out = tmp_path / "sub" / "mp.elf"
    assert cli(["firmware", "build", "micropython", "-o", str(out)]) == 0
    assert out.read_bytes() == mp_build.elf_path().read_bytes()
    assert cli(["firmware", "build", "micropython", "-o", str(out), "-O3"]) == 2
    assert "fixed flags" in capsys.readouterr().err


def test_a_bad_source_is_a_clear_error(tmp_path, monkeypatch, capsys):
    not_gz = tmp_path / "micropython.tar.gz"
    not_gz.write_text("not a tarball")
    for value, text in ((tmp_path / "missing", "no such file or folder"),
                        (tmp_path, "not micropython's source (no py/, shared/ inside)"),
                        (not_gz, "cannot unpack it as a .tar.gz")):
        monkeypatch.setenv("DELTACHIP_MICROPYTHON", str(value))
        assert cli(["firmware", "build", "micropython", "-o", str(tmp_path / "mp.elf")]) == 2
        err = capsys.readouterr().err
        assert f"error: {value}" in err or f"error: DELTACHIP_MICROPYTHON={value}" in err
        assert text in err and "Traceback" not in err, err
    assert not (tmp_path / "mp.elf").exists()


# ---------------------------------------------------------------- the compiled core

def run_fast(elf: Path, names: list[str]) -> list:
    from cpu.rv32.engines import CoreBatch
    from cpu.rv32.loader import load_program
    images = [load_program(elf, source(n).encode()) for n in names]
    return CoreBatch(images, "fast", threads=1).run(MAX_STEPS)


def check_fast(elf: Path, names: list[str]) -> None:
    for name, got in zip(names, run_fast(elf, names)):
        want = run_ref(elf, source(name))
        assert got.fault is None and not got.timed_out, (name, got.fault)
        assert (got.output, got.exit_code, got.instructions) == \
            (want.output, want.exit_code, want.instructions), name
        assert got.output.decode() == cpython(source(name)).stdout, name


def test_fast_engine_equals_ref(mp_elf):
    check_fast(mp_elf, FAST_DEFAULT)


@pytest.mark.slow
def test_fast_engine_equals_ref_on_longer_programs(mp_elf):
    check_fast(mp_elf, FAST_SLOW)


def test_sim_engine_equals_ref(mp_elf, capsys):
    src = source("hello")
    want = run_ref(mp_elf, src)
    capsys.readouterr()
    status = cli(["run", str(mp_elf), "--engine", "sim", "--input", src])
    assert (status, capsys.readouterr().out.encode()) == (want.exit_code, want.output)


@pytest.mark.slow
def test_builds_from_scratch(tmp_path, monkeypatch):
    """A clean cache folder: MicroPython (and picolibc) built from the source tarball."""
    monkeypatch.setenv("DELTACHIP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DELTACHIP_JOBS", "2")
    elf = mp_build.elf_path()
    assert elf.parent.parent == tmp_path / "cache" and (elf.parent / "LICENSE").is_file()
    r = run_ref(elf, "print(2**100)")
    assert (r.exit_code, r.output) == (0, f"{2**100}\n".encode())
