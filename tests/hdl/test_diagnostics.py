"""Golden error texts: one small source per kind of error, the whole rendered text compared
exactly. Diagnostics are API: change a text here only on purpose."""
from __future__ import annotations

import textwrap

import pytest

from common.errors import UserError
from hdl.diagnostics import CompileError, Diagnostic, render
from hdl.frontend import load_circuit, load_module_source, load_source
from hdl.ir import Loc


def errors_of(src: str, name: str = "t.hdl") -> str:
    """The rendered diagnostics of ``src`` (a circuit file, or module 'm' when it has no circuit)."""
    src = textwrap.dedent(src).lstrip("\n")
    with pytest.raises(CompileError) as info:
        if "circuit " in src:
            load_source(src, name)
        else:
            load_module_source(src, "m", filename=name)
    return str(info.value)


def golden(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


CASES = {
    "syntax error: expression expected": ("""
        circuit C {
            let x = ;
        }
        """, """
        t.hdl:2:13: error: unexpected ';': expected an expression after '='
            let x = ;
                    ^
        """),
    "syntax error: one of several": ("""
        module m (in a: u8, out y: u8) {
            y = a
        }
        """, """
        t.hdl:3:1: error: unexpected '}': expected ';' after 'a'
        }
        ^
        """),
    "syntax error: end of file": ("""
        circuit C {
            token T halt;
        """, """
        t.hdl:2:18: error: unexpected end of file: expected one of: a statement, '}' after ';'
            token T halt;
                         ^
        """),
    "syntax error: bad character": ("""
        module m (in a: u8, out y: u8) { y = a @ a; }
        """, """
        t.hdl:1:40: error: unexpected character '@'
        module m (in a: u8, out y: u8) { y = a @ a; }
                                               ^
        """),
    "unknown name": ("""
        module m (in count: u8, out y: u8) {
            y = cuont + 1;
        }
        """, """
        t.hdl:2:9: error: unknown name 'cuont'; did you mean 'count'?
            y = cuont + 1;
                ^
        """),
    "width mismatch in an operator": ("""
        module m (in a: u8, in b: u9, out y: u8) {
            y = a + b;
        }
        """, """
        t.hdl:2:11: error: width mismatch in '+': left operand is 8 bits, right operand is 9 bits
            y = a + b;
                  ^
        """),
    "width mismatch in an assignment": ("""
        module m (in a: u9, out y: u8) {
            y = a;
        }
        """, """
        t.hdl:2:9: error: width mismatch: cannot assign a 9-bit value to 'y' (8 bits)
            y = a;
                ^
        """),
    "signed/unsigned mix": ("""
        module m (in a: s8, in b: u8, out y: u1) {
            y = a < b;
        }
        """, """
        t.hdl:2:11: error: signed/unsigned mix in '<': left is s8, right is u8; convert one with signed() or unsigned()
            y = a < b;
                  ^
        """),
    "undriven output and signal": ("""
        module m (in a: u8, out y: u8, out z: u8) {
            wire w: u8;
            y = a;
        }
        """, """
        t.hdl:1:32: error: output 'z' of module 'm' is never driven
        module m (in a: u8, out y: u8, out z: u8) {
                                       ^
        t.hdl:2:5: error: signal 'w' is never driven
            wire w: u8;
            ^
        """),
    "not driven on every path": ("""
        module m (in a: u8, in c: u1, out y: u8) {
            if c {
                y = a;
            }
        }
        """, """
        t.hdl:1:31: error: output 'y' of module 'm' is not driven on every path
        module m (in a: u8, in c: u1, out y: u8) {
                                      ^
        t.hdl:3:9: note: driven here on some paths only
        """),
    "multiply driven": ("""
        module m (in a: u8, out y: u8) {
            wire w: u8;
            w = a;
            w = ~a;
            y = w;
        }
        """, """
        t.hdl:4:5: error: signal 'w' is driven more than once
            w = ~a;
            ^
        t.hdl:3:5: note: first driven here
        """),
    "combinational loop": ("""
        module m (in a: u8, out y: u8) {
            wire p: u8;
            wire q: u8;
            p = q + a;
            q = p ^ 8'd1;
            y = q;
        }
        """, """
        t.hdl:2:5: error: combinational loop: p -> q -> p
            wire p: u8;
            ^
        t.hdl:2:5: note: signal p
        t.hdl:3:5: note: signal q
        """),
    "combinational loop through an instance": ("""
        module inc (in a: u8, out y: u8) {
            y = a + 1;
        }
        module m (in x: u8, out o: u8) {
            wire w: u8;
            inst u = inc(a: w ^ x);
            w = u.y;
            o = w;
        }
        """, """
        t.hdl:5:5: error: combinational loop: w -> u.a -> u.y -> w
            wire w: u8;
            ^
        t.hdl:5:5: note: signal w
        t.hdl:6:23: note: signal u.a
        t.hdl:1:23: note: signal u.y
        """),
    "unknown type with a suggestion": ("""
        module m (in a: u8, out y: uint8) {
            y = a;
        }
        """, """
        t.hdl:1:28: error: unknown type 'uint8'; did you mean 'u8'?
        module m (in a: u8, out y: uint8) {
                                   ^
        """),
    "non-exhaustive match": ("""
        module m (in a: u2, out y: u8) {
            match a {
                0 | 1 => { y = 1; }
                2 => { y = 2; }
            }
        }
        """, """
        t.hdl:2:5: error: match is not exhaustive: value 3 not covered (add it, or '_ => { ... }')
            match a {
            ^
        """),
    "non-exhaustive match on token kinds": ("""
        circuit C {
            token A;
            token B halt;
            match tok {
                A => { next = B(); }
            }
        }
        """, """
        t.hdl:4:5: error: match is not exhaustive: token kind B not covered (add it, or '_ => { ... }')
            match tok {
            ^
        """),
    "duplicate match pattern": ("""
        module m (in a: u2, out y: u8) {
            match a {
                0 | 1 => { y = 1; }
                2 | 1 => { y = 2; }
                _ => { y = 3; }
            }
        }
        """, """
        t.hdl:4:13: error: duplicate match pattern: value 1 is already covered
                2 | 1 => { y = 2; }
                    ^
        t.hdl:3:13: note: first covered here
        """),
    "write to a rom": ("""
        circuit C {
            token T halt;
            rom r: u8[4];
            r[0] <= 1;
            next = T();
        }
        """, """
        t.hdl:4:5: error: cannot write to rom 'r': a rom is read-only (declare it as ram to write it)
            r[0] <= 1;
            ^
        """),
    "out-of-range constant": ("""
        module m (in a: u8, out y: u8) {
            y = a + 300;
        }
        """, """
        t.hdl:2:11: error: constant 300 does not fit the other operand of '+': u8 holds 0..255
            y = a + 300;
                  ^
        """),
    "out-of-range sized literal": ("""
        module m (out y: u4) {
            y = 4'd20;
        }
        """, """
        t.hdl:2:9: error: constant 4'd20 does not fit its 4 bits
            y = 4'd20;
                ^
        """),
    "memory written twice on one path": ("""
        circuit C {
            token T halt;
            ram r: u8[4];
            r[0] <= 1;
            r[1] <= 2;
            next = T();
        }
        """, """
        t.hdl:5:5: error: memory 'r' is written twice on one path
            r[1] <= 2;
            ^
        t.hdl:4:5: note: first written here
        """),
    "next not assigned on every path": ("""
        circuit C {
            token T(v: u1) halt;
            if tok.T.v {
                next = T(v: 0);
            }
        }
        """, """
        t.hdl:1:1: error: the next token is not assigned on every path in circuit 'C'
        circuit C {
        ^
        t.hdl:4:9: note: assigned here on some paths only
        """),
    "wrong field name in a token": ("""
        circuit C {
            token Count(value: u8) halt;
            next = Count(valeu: 1);
        }
        """, """
        t.hdl:3:18: error: token kind Count has no field 'valeu'; did you mean 'value'?
            next = Count(valeu: 1);
                         ^
        """),
    "a bound on a field that is not the last": ("""
        circuit C {
            token T(i: u4 < 11, v: u3) halt;
            next = T(i: 0, v: 0);
        }
        """, """
        t.hdl:2:21: error: field 'i' of T: only a kind's last field may have a bound (it is the payload's highest bits): declare 'i' last
            token T(i: u4 < 11, v: u3) halt;
                            ^
        """),
    "a bound a narrower field holds, or a signed one": ("""
        circuit C {
            token T(v: u3, i: u4 < 8) halt;
            token S(v: s4 < 12) halt;
            next = T(v: 0, i: 0);
        }
        """, """
        t.hdl:2:28: error: field 'i' of T: bound 8 must be above 8 and at most 16 for u4 (a smaller bound fits a narrower field)
            token T(v: u3, i: u4 < 8) halt;
                                   ^
        t.hdl:3:21: error: field 'v' of S: a bound needs an unsigned field, not a signed one
            token S(v: s4 < 12) halt;
                            ^
        """),
    "widths outside 1..64": ("""
        module m (in a: u[65], out y: u0) {
            y = 0;
        }
        """, """
        t.hdl:1:17: error: width 65 is outside 1..64
        module m (in a: u[65], out y: u0) {
                        ^
        t.hdl:1:31: error: width 0 is outside 1..64
        module m (in a: u[65], out y: u0) {
                                      ^
        """),
    "import not found": ("""
        import nosuchlib;
        circuit C {
            token T halt;
            next = T();
        }
        """, """
        t.hdl:1:1: error: cannot find 'nosuchlib.hdl' to import (looked in the importing file's folder or in stdlib/)
        import nosuchlib;
        ^
        """),
    "transparent rom": ("""
        circuit C {
            token T(a: u3, d: u8);
            rom r: u8[4] transparent;
            next = T(a: 0, d: r[tok.T.a]);
        }
        """, """
        t.hdl:3:18: error: only a ram can be transparent (a rom is never written)
            rom r: u8[4] transparent;
                         ^
        """),
    "table ram": ("""
        circuit C {
            token T(a: u3, d: u8);
            ram m: u8[4] table;
            next = T(a: 0, d: m[tok.T.a]);
        }
        """, """
        t.hdl:3:18: error: only a rom can be a table (a table's words become rows of the embedding and never change)
            ram m: u8[4] table;
                         ^
        """),
    "table rom read at an address from state": ("""
        circuit C {
            token T(a: u3, d: u8);
            rom sq: u8[8] table;
            ram at: u3[1];
            at[0] <= tok.T.a;
            next = T(a: 0, d: sq[at[0] + tok.T.a]);
        }
        """, """
        t.hdl:6:23: error: table rom 'sq' is read at an address that depends on more than the current token; a table rom's words become rows of the embedding, so its address may use token fields and constants only
            next = T(a: 0, d: sq[at[0] + tok.T.a]);
                              ^
        t.hdl:6:26: note: the address reads memory 'at' here
        """),
    "transparent write from its own read": ("""
        circuit C {
            token T(a: u3, d: u8);
            ram m: u8[8] transparent;
            let v = m[tok.T.a];
            m[tok.T.a] <= v + 8'd1;
            next = T(a: 0, d: v);
        }
        """, """
        t.hdl:5:5: error: the write to transparent memory 'm' depends on a read of 'm' in the same step; its reads see this write, so that is a combinational loop
            m[tok.T.a] <= v + 8'd1;
            ^
        t.hdl:4:13: note: the read of 'm' is here
        """),
    "several errors in one pass": ("""
        module m (in a: u8, out y: u8) {
            let p = a + 16'd1;
            let q = b;
            y = 1000;
        }
        """, """
        t.hdl:2:15: error: width mismatch in '+': left operand is 8 bits, right operand is 16 bits
            let p = a + 16'd1;
                      ^
        t.hdl:3:13: error: unknown name 'b'
            let q = b;
                    ^
        t.hdl:4:9: error: constant 1000 does not fit 'y': u8 holds 0..255
            y = 1000;
                ^
        """),
}


@pytest.mark.parametrize("case", list(CASES))
def test_golden_error_text(case):
    src, want = CASES[case]
    assert errors_of(src) == golden(want)


def test_import_cycle(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.hdl").write_text("import b;\ncircuit C { token T halt; next = T(); }\n")
    (tmp_path / "b.hdl").write_text("import a;\nconst X = 1;\n")
    with pytest.raises(CompileError) as info:
        load_circuit("a.hdl")
    assert str(info.value) == golden("""
        b.hdl:1:1: error: import cycle: a.hdl -> b.hdl -> a.hdl
        import a;
        ^
        """)


def test_error_in_an_imported_module_points_into_that_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lib.hdl").write_text("module inc (in a: u8, out y: u8) {\n    y = a + 1000;\n}\n")
    (tmp_path / "top.hdl").write_text(
        "import lib;\ncircuit C {\n    token T(v: u8) halt;\n    next = T(v: inc(tok.T.v));\n}\n")
    with pytest.raises(CompileError) as info:
        load_circuit("top.hdl")
    assert str(info.value) == golden("""
        lib.hdl:2:11: error: constant 1000 does not fit the other operand of '+': u8 holds 0..255
            y = a + 1000;
                  ^
        """)


def test_compile_error_is_a_user_error_with_every_diagnostic():
    with pytest.raises(UserError) as info:
        load_module_source("module m (in a: u8, out y: u8) { y = b + c; }", "m", filename="x.hdl")
    err = info.value
    assert isinstance(err, CompileError) and err.exit_code == 2
    assert [d.message for d in err.diagnostics] == ["unknown name 'b'", "unknown name 'c'"]


def test_render_without_source_and_with_tabs():
    d = Diagnostic(Loc("f.hdl", 1, 3), "boom", [(Loc("g.hdl", 2, 1), "here")])
    assert render([d], {}) == "f.hdl:1:3: error: boom\ng.hdl:2:1: note: here"
    assert render([d], {"f.hdl": "\tx y\n"}) == "f.hdl:1:3: error: boom\n\tx y\n\t ^\ng.hdl:2:1: note: here"


def test_whole_file_errors_have_no_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "two.hdl").write_text("circuit A { token T halt; next = T(); }\n"
                                      "circuit B { token T halt; next = T(); }\n")
    with pytest.raises(CompileError) as info:
        load_circuit("two.hdl")
    assert str(info.value) == "two.hdl: error: two.hdl declares several circuits (A, B): choose one with --top"
    with pytest.raises(CompileError) as info:
        load_circuit("missing.hdl")
    assert str(info.value) == "missing.hdl: error: cannot read source file: No such file or directory"


def test_rom_image_errors_are_located_at_the_declaration(tmp_path):
    """The elaborator and `--rom` share one image reader (hdl/images.py); the elaborator puts
    its message at the `rom` declaration."""
    (tmp_path / "bad.hex").write_text("1\n2 zz\n")
    (tmp_path / "big.bin").write_bytes(bytes(5))
    src = ('circuit C { token A(v: u8) halt; rom t: u8[4] = "bad.hex"; '
           'rom b: u8[4] = "big.bin"; rom m: u8[4] = "gone.hex"; next = A(v: t[0] ^ b[0] ^ m[0]); }')
    with pytest.raises(CompileError) as info:
        load_source(src, str(tmp_path / "t.hdl"))
    assert [d.message for d in info.value.diagnostics] == [
        "ROM image 'bad.hex' line 2: 'zz' is not a hexadecimal word",
        "ROM image 'big.bin' has 5 words, more than the depth 4",
        "ROM image 'gone.hex' cannot be read: No such file or directory"]


@pytest.mark.parametrize("body", [
    "if tok.A.v == 1 { " * 600 + "}" * 600,          # used to escape as lark's VisitError
    "let x: u8 = " + "-" * 5000 + "tok.A.v;",
])
def test_deep_nesting_within_the_limit_compiles(body):
    """Hundreds of nested ifs, thousands of chained operators: within hdl.parser.MAX_NESTING
    (the limit itself: tests/hdl/test_depth_and_literals.py)."""
    src = "circuit C { token A(v: u8) halt; " + body + " next = A(v: 0); }"
    assert load_source(src, "deep.hdl").kinds[0].name == "A"


def test_unreadable_import_is_located_at_the_import(tmp_path):
    (tmp_path / "lib.hdl").write_bytes(b"\xff\xfe")
    (tmp_path / "t.hdl").write_text('import "lib.hdl";\ncircuit C { token A halt; next = A(); }\n')
    with pytest.raises(CompileError) as info:
        load_circuit(tmp_path / "t.hdl")
    d, = info.value.diagnostics
    assert (d.loc.line, d.loc.col) == (1, 1)
    assert d.message == f"cannot read '{tmp_path / 'lib.hdl'}' to import: not a UTF-8 text file"


def test_memory_depth_limit():
    """Regression: a huge depth used to reach the simulator and die allocating it."""
    src = "circuit C { token A(v: u8) halt; ram r: u8[99999999999]; next = A(v: r[0]); }"
    assert errors_of(src) == golden("""
        t.hdl:1:44: error: memory depth 99999999999 is too large (at most 16,777,216 words)
        circuit C { token A(v: u8) halt; ram r: u8[99999999999]; next = A(v: r[0]); }
                                                   ^
        """)


def test_nested_loops_have_a_total_unroll_budget(monkeypatch):
    """Regression: two nested 0..65536 loops (each within the per-loop limit) used to
    elaborate for hours; the budget is reported once, at the loop that crosses it."""
    import hdl.elab.stmts
    monkeypatch.setattr(hdl.elab.stmts, "MAX_TOTAL_UNROLL", 100)
    src = """
        circuit C {
            token A(v: u8) halt;
            var x: u8 = 0;
            for i in 0..20 { for j in 0..20 { x = x + 1; } }
            next = A(v: x);
        }
        """
    assert errors_of(src) == golden("""
        t.hdl:4:22: error: loops unroll more than 100 iterations in total (nested loops multiply): use smaller bounds
            for i in 0..20 { for j in 0..20 { x = x + 1; } }
                             ^
        """)


def test_top_that_names_a_module_says_so():
    src = "module m (in a: u8, out y: u8) { y = a; }\ncircuit C { token A halt; next = A(); }\n"
    with pytest.raises(CompileError) as info:
        load_source(src, "two.hdl", top="m")
    assert str(info.value) == ("two.hdl: error: 'm' in two.hdl is a module, not a circuit "
                               "(token kinds and `next`)")
    with pytest.raises(CompileError) as info:
        load_source(src, "two.hdl", top="D")
    assert str(info.value) == "two.hdl: error: no circuit 'D' in two.hdl"


def test_utf8_bom_is_accepted_in_sources_and_images(tmp_path):
    """Regression: a byte-order mark (Windows editors) read as an unexpected character."""
    (tmp_path / "t.hex").write_bytes(b"\xef\xbb\xbf2a\r\n")
    (tmp_path / "t.hdl").write_bytes(b"\xef\xbb\xbfcircuit C { token A(v: u8) halt; "
                                     b'rom r: u8[1] = "t.hex"; next = A(v: r[0]); }\r\n')
    c = load_circuit(tmp_path / "t.hdl")
    assert c.memories["r"].init == (0x2A,)


@pytest.mark.parametrize("content, message", [
    (b"", "empty.hdl: error: empty.hdl declares no circuit"),
    (b"// only a comment\n", "empty.hdl: error: empty.hdl declares no circuit"),
    (b"\x7fELF\x01\x01\x01\x00\xff\xfe", "empty.hdl: error: cannot read source file: not a UTF-8 "
                                         "text file"),
])
def test_empty_and_binary_files(tmp_path, monkeypatch, content, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.hdl").write_bytes(content)
    with pytest.raises(CompileError) as info:
        load_circuit("empty.hdl")
    assert str(info.value) == message


def test_a_name_declared_by_two_imports(tmp_path, monkeypatch):
    """Regression: the first import silently won, so `import "mine.hdl"` could be ignored."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.hdl").write_text("module inc (in a: u8, out y: u8) { y = a + 1; }\n")
    (tmp_path / "b.hdl").write_text("const K = 1;\nmodule inc (in a: u8, out y: u8) { y = a; }\n")
    (tmp_path / "t.hdl").write_text('import "a.hdl";\nimport "b.hdl";\nimport "a.hdl";\n'
                                    "circuit C { token T(v: u8) halt; next = T(v: inc(K)); }\n")
    with pytest.raises(CompileError) as info:
        load_circuit("t.hdl")
    assert str(info.value) == golden("""
        t.hdl:2:1: error: 'inc' is declared by both a.hdl and b.hdl: rename one, or import only one
        import "b.hdl";
        ^
        a.hdl:1:1: note: declared here
        b.hdl:2:1: note: and here
        """)


def test_sources_and_images_past_their_size_limit(tmp_path, monkeypatch):
    """Issue 28, class 3: a source, an imported source or a ROM image larger than its limit
    (hdl.elab.files.MAX_SOURCE_BYTES; hdl.images.image_limit) is refused, located where it
    is named, without being read in full. (The limits are made small here; the command line
    on /dev/zero: tests/test_input_bounds.py.)"""
    import hdl.elab.files
    import hdl.images
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hdl.elab.files, "MAX_SOURCE_BYTES", 200)
    monkeypatch.setattr(hdl.images, "IMAGE_SLACK", 16)
    (tmp_path / "big.hdl").write_text("// " + "x" * 300 + "\n")
    (tmp_path / "big.bin").write_bytes(bytes(21))
    (tmp_path / "t.hdl").write_text('import "big.hdl";\ncircuit C { token A halt; next = A(); }\n')
    with pytest.raises(CompileError) as info:
        load_circuit("t.hdl")
    assert str(info.value) == golden("""
        t.hdl:1:1: error: 'big.hdl' is larger than 200 bytes, the limit for a .hdl source (the front end holds about 170 bytes of memory per source byte)
        import "big.hdl";
        ^
        """)
    (tmp_path / "r.hdl").write_text('circuit C { token A(v: u8) halt; rom b: u8[4] = "big.bin"; '
                                    'next = A(v: b[0]); }\n')
    with pytest.raises(CompileError) as info:
        load_circuit("r.hdl")
    assert str(info.value) == golden("""
        r.hdl:1:49: error: ROM image 'big.bin' is larger than 20 bytes, the limit for a .bin image of u8[4] (4 words of 1 byte plus 16 bytes)
        circuit C { token A(v: u8) halt; rom b: u8[4] = "big.bin"; next = A(v: b[0]); }
                                                        ^
        """)
    with pytest.raises(CompileError) as info:
        load_circuit("big.hdl")
    assert str(info.value) == ("big.hdl: error: this file is larger than 200 bytes, the limit "
                               "for a .hdl source (the front end holds about 170 bytes of memory "
                               "per source byte)")
    with pytest.raises(CompileError) as info:
        load_source("// " + "é" * 100, "text.hdl")
    assert str(info.value) == ("text.hdl: error: the source text is larger than 200 bytes, the "
                               "limit for a .hdl source (the front end holds about 170 bytes of "
                               "memory per source byte)")
