"""`deltachip run --inputs` on the batch engines (issue 43, class 1): the lines run in groups
of at most STREAM_GROUP streams (memory independent of the line count), each line printed as
soon as it and every line before it are done. The core's engine is replaced by a fake here
(compiling the core takes minutes): what is tested is the grouping, the order and the
printing."""
from __future__ import annotations

import threading

import pytest

from cpu.rv32 import engines
from deltachip.cli import main
from deltachip.commands.run import input_lines
from tests.cpu.test_run_cli import echo_program


class FakeEngine:
    """Records the size of every cache it makes; runs rows apart, as the fast engine does."""
    runs_rows_apart = True

    def __init__(self):
        self.caches: list[int] = []

    def new_cache(self, batch, roms=None):
        self.caches.append(batch)
        return object()


@pytest.fixture
def fake(monkeypatch):
    """The fast engine faked: each stream 'prints' its input reversed and exits 0 (1 for an
    input starting with 'x'); ``fake.started`` records the streams in the order they ran."""
    eng = FakeEngine()
    eng.started = []
    lock = threading.Lock()

    def advance(e, cache, row, reader, cur, max_steps, chunk=0, feed=None):
        with lock:
            eng.started.append(bytes(feed.data))
        reader.output += bytes(reversed(feed.data))
        reader.instructions += 1
        reader.exit_code = 1 if feed.data.startswith(b"x") else 0
        return cur
    monkeypatch.setattr(engines, "batch_engine", lambda *a, **k: eng)
    monkeypatch.setattr(engines, "fast_advance", advance)
    return eng


def test_input_lines_are_split_lazily():
    assert list(input_lines(b"a\n\nb\n")) == [b"a", b"", b"b"]
    assert list(input_lines(b"a")) == [b"a"]
    assert list(input_lines(b"\n")) == [b""]
    lines = input_lines(b"1\n2\n3")
    assert next(lines) == b"1"          # a generator: nothing is split ahead


def test_many_lines_run_in_bounded_groups(build_elf, elf_file, tmp_path, capfd, fake,
                                          monkeypatch):
    monkeypatch.setattr(engines, "STREAM_GROUP", 4)
    path = echo_program(build_elf, elf_file)
    inputs = tmp_path / "in.txt"
    lines = [f"{k:03d}".encode() for k in range(10)]
    inputs.write_bytes(b"\n".join(lines) + b"\n")
    stats = tmp_path / "s.json"
    runner = engines.fast_batch(path, lambda: input_lines(inputs.read_bytes()), 10, threads=2,
                                group=4)
    got = [r.output for r in runner.results(100)]
    assert got == [bytes(reversed(x)) for x in lines]
    assert fake.caches == [4, 4, 2]
    assert runner.counters() == {"streams": 10, "done": 10, "instructions": 10, "tokens": 10}
    fake.caches.clear()
    assert main(["run", str(path), "--engine", "fast", "--inputs", str(inputs),
                 "--stats", str(stats)]) == 0
    assert capfd.readouterr().out == "".join(f"{k:03d}"[::-1] + "\n" for k in range(10))
    assert fake.caches == [4, 4, 2]


def test_each_line_is_printed_before_later_groups_run(build_elf, elf_file, tmp_path, fake,
                                                      monkeypatch):
    """A line's result is written (and flushed) before any stream of a later group starts:
    a kill then loses no finished line."""
    monkeypatch.setattr(engines, "STREAM_GROUP", 2)
    path = echo_program(build_elf, elf_file)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"ab\ncd\nef\ngh\nij\n")
    seen: list[tuple[str, bytes]] = []

    class Out:
        def write(self, b):
            seen.append(("out", b))

        def flush(self):
            pass
    real = fake.new_cache
    fake.new_cache = lambda n, roms=None: (seen.append(("group", n)), real(n, roms))[1]
    import sys
    monkeypatch.setattr(sys, "stdout", type("S", (), {"buffer": Out()})())
    assert main(["run", str(path), "--engine", "fast", "--inputs", str(inputs)]) == 0
    assert seen == [("group", 2), ("out", b"ba\n"), ("out", b"dc\n"), ("group", 2),
                    ("out", b"fe\n"), ("out", b"hg\n"), ("group", 1), ("out", b"ji\n")]


def test_a_line_that_does_not_fit_is_refused_before_any_runs(build_elf, elf_file, tmp_path,
                                                             capfd, fake):
    path = echo_program(build_elf, elf_file)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"ok\n" * 40 + b"y" * 16 + b"\n")
    assert main(["run", str(path), "--engine", "fast", "--inputs", str(inputs)]) == 2
    assert capfd.readouterr() == ("", f"{inputs}:41: --input text is 16 bytes; the program's "
                                      f"input buffer holds 16 bytes including the terminating "
                                      f"NUL\n")
    assert fake.started == [] and fake.caches == []


def test_the_status_is_the_first_failing_line_s(build_elf, elf_file, tmp_path, capfd, fake):
    path = echo_program(build_elf, elf_file)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes(b"a\nxb\nxc\n")
    assert main(["run", str(path), "--engine", "fast", "--inputs", str(inputs)]) == 1
    assert capfd.readouterr().out == "a\nbx\ncx\n"
