"""A counted hostile-input pass over merge, chat, `run --inputs`, `run --model`, the core
cache and the front end (issue 43's closing check).

Each probe is one command line (``python -m deltachip ...``) run in a folder of its own
after a setup that damages a copy of a small fixture (a file deleted, truncated, a byte
flipped, bytes appended; a directory, a FIFO, a symbolic link to /dev/zero or to itself
where a file should be; JSON invalid, nested too deep, of the wrong type, a field of the
wrong type; prompts, standard input and ``--inputs`` files too large or not UTF-8; output
paths that break the OUT_DIR rules; ...), under a memory cap (RLIMIT_AS) and a timeout.
A probe passes when:

- it ends within its timeout (else class 5, a hang),
- no ``Traceback`` is on stderr (class 4) and no MemoryError or kill (class 1),
- its exit status is one it allows: 1 or 2 for damaged input, with a last stderr line that
  names the file or option given (class 7 otherwise), or 0 where success is right (exit 0
  on damaged input: class 3),
- no input file changed (size, mtime, sha256; class 2) and nothing appeared outside the
  probe's declared outputs (class 6).

Usage (from the repository root, in the project's virtual environment; fixtures are built
once under WORK and reused; run one probe at a time on a shared machine)::

    python scripts/hostile_pass.py --work /tmp/hostile --build-merged --jobs 1
    python scripts/hostile_pass.py --work /tmp/hostile --merged DIR [--only SURFACE]
        [--match TEXT] [--list] [--json results.json]

``--build-merged``: the chat and ``--model`` probes run on a tiny random Qwen3.5 base with
Qwen3.5's real tokenizer (tests/merge/qwen35.py) merged with ``--firmware calc --target
compact``, built once under WORK/fx (minutes; the core comes from the core cache, compiled
there the first time). ``--merged DIR``: any checkpoint ``deltachip merge BASE OUT
--firmware calc`` wrote instead. Its small files are copied into each probe's folder, its
shards hard-linked (a shard is copied only to be damaged). Without either, those surfaces
are skipped. Probes run with ``DELTACHIP_CACHE`` at WORK/cache unless it is set.

The summary counts probes and failures per surface and findings per class; the exit
status is 1 when any probe failed. Remove WORK when done (fixtures and caches: about 1 GB).
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
COUNTER = ROOT / "examples" / "counter" / "counter.hdl"
STACK = ROOT / "examples" / "stack_machine" / "stack_machine.hdl"
#: the address space of a probe
MEM_CAP = 6 << 30

CLASSES = {1: "unbounded read/memory", 2: "data loss", 3: "success on damaged input",
           4: "traceback", 5: "hang", 6: "leftovers", 7: "wrong message"}


@dataclass
class Probe:
    surface: str
    name: str
    argv: list                          # after `deltachip`; "{D}" is the probe's folder
    setup: Callable[[Path], None] | None = None
    ok: tuple = (1, 2)                  # allowed exit statuses
    names: str | None = ""              # a text the last stderr line must hold ("": none)
    stdin: object = None                # None (/dev/null), bytes, or a path (str) to open
    outputs: tuple = ()                 # paths relative to D the command may write
    env: dict = field(default_factory=dict)
    timeout: int = 120
    shell_tail: str = ""                # e.g. ">&-"
    note: str = ""
    forbid: tuple = ()                  # texts stderr must not hold (class 7)
    program: bool = False               # `run`: exits 1-3 may be the program's own (calc's
    #                                     errors, on stdout): no message asked of them


# ---- setups: damaging a copy -------------------------------------------------------------

def copy_tree(src: Path, dst: Path, link_over: int = 1 << 20) -> Path:
    """A copy of ``src`` at ``dst``: files up to ``link_over`` bytes copied, larger ones
    hard-linked (a probe that damages one copies it first: :func:`own`)."""
    for p in sorted(src.rglob("*")):
        q = dst / p.relative_to(src)
        if p.is_dir():
            q.mkdir(parents=True, exist_ok=True)
        else:
            q.parent.mkdir(parents=True, exist_ok=True)
            if p.stat().st_size > link_over:
                os.link(p, q)
            else:
                shutil.copy2(p, q)
    dst.mkdir(parents=True, exist_ok=True)
    return dst


def own(p: Path) -> None:
    """Make ``p`` a file of its own (break a hard link) before it is changed in place."""
    if p.is_file() and not p.is_symlink() and p.stat().st_nlink > 1:
        tmp = p.with_name(p.name + ".own")
        shutil.copyfile(p, tmp)
        os.replace(tmp, p)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()


def feed_fifo(p: Path, data: bytes, wait: float = 600) -> None:
    """Make ``p`` a named pipe (FIFO) that a thread writes ``data`` into once a reader opens
    it (an input given as a stream: ``--inputs <(...)`` and the like). A FIFO that nothing
    writes is not probed where a user names an input stream: its reader waits for a writer
    as every Unix reader does (the project reads it with a bound; Ctrl-C ends the wait)."""
    os.mkfifo(p)

    def write():
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:      # ENXIO: no reader yet
                    return
                time.sleep(0.05)
                continue
            try:
                os.set_blocking(fd, True)
                os.write(fd, data)
            except OSError:                     # the reader stopped reading
                pass
            finally:
                os.close(fd)
            return
    threading.Thread(target=write, daemon=True).start()


def _at(p: Path, where) -> int:
    n = p.stat().st_size
    return max(0, min(n - 1, int(n * where) if isinstance(where, float) else
                      (where if where >= 0 else n + where)))


def damage(p: Path, kind: str) -> None:
    """Damage file ``p`` as ``kind`` says (see :data:`FILE_KINDS`)."""
    if kind == "deleted":
        _remove(p)
    elif kind == "dir":
        _remove(p)
        p.mkdir()
    elif kind == "fifo-fed":
        data = p.read_bytes()
        _remove(p)
        feed_fifo(p, data)
    elif kind == "fifo":
        _remove(p)
        os.mkfifo(p)
    elif kind == "devzero":
        _remove(p)
        p.symlink_to("/dev/zero")
    elif kind == "devnull":
        _remove(p)
        p.symlink_to("/dev/null")
    elif kind == "loop":
        _remove(p)
        p.symlink_to(p.name)
    elif kind == "dangling":
        _remove(p)
        p.symlink_to(p.name + ".nowhere")
    elif kind == "empty":
        _remove(p)
        p.write_bytes(b"")
    elif kind.startswith("trunc"):
        own(p)
        at = {"trunc1": 1, "trunc8": 8, "trunc-half": 0.5, "trunc-1": -1}[kind]
        n = _at(p, at)
        with open(p, "r+b") as f:
            f.truncate(n)
    elif kind.startswith("flip"):
        own(p)
        at = {"flip0": 0, "flip9": 9, "flip-mid": 0.5, "flip-last": -1}[kind]
        n = _at(p, at)
        with open(p, "r+b") as f:
            f.seek(n)
            b = f.read(1)
            f.seek(n)
            f.write(bytes([b[0] ^ 0x5A]))
    elif kind == "tail":
        own(p)
        with open(p, "ab") as f:
            f.write(b"\0" * 8)
    elif kind == "huge":
        own(p)
        with open(p, "r+b") as f:
            f.truncate(8 << 30)             # sparse: no room taken
    elif kind == "notutf8":
        own(p)
        p.write_bytes(b"\xff\xfe\xc3(" + p.read_bytes())
    else:
        raise ValueError(kind)


#: what every file-damage family tries
FILE_KINDS = ["deleted", "dir", "fifo", "devzero", "loop", "dangling", "empty", "trunc-half",
              "flip0", "flip-mid", "tail", "huge"]
#: damage no reader can see in a file without a digest (a base's: a byte of a weight or of
#: a number flipped): success is right
UNSEEN = ("flip-mid",)
#: the same for the expensive surfaces (each probe loads torch)
FEW_KINDS = ["deleted", "fifo", "devzero", "trunc-half", "flip-mid", "huge"]
#: JSON contents that are wrong in kind
JSON_KINDS = {
    "json-invalid": b'{"a": ',
    "json-array": b"[]",
    "json-deep": b"[" * 200_000 + b"]" * 200_000,
    "json-bigint": b'{"x": ' + b"9" * 5000 + b"}",
    "json-nan": b'{"x": NaN}',
}


def write_json_kind(p: Path, kind: str) -> None:
    _remove(p)
    p.write_bytes(JSON_KINDS[kind])


def edit_json(p: Path, **changes) -> None:
    """Set fields of JSON file ``p`` (a value :data:`DROP` removes the field)."""
    own(p)
    d = json.loads(p.read_text())
    for k, v in changes.items():
        if v is DROP:
            d.pop(k, None)
        else:
            d[k] = v
    _remove(p)
    p.write_text(json.dumps(d))


DROP = object()


def rerecord(model: Path, rel: str) -> None:
    """Write file ``rel``'s new size and sha256 into merged model's deltachip.json file
    record (a model damaged consistently: what the digests cannot catch)."""
    m = model / "deltachip.json"
    own(m)
    d = json.loads(m.read_text())
    p = model / rel
    rec = {"bytes": p.stat().st_size}
    if "sha256" in d["files"].get(rel, {}):
        rec["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    d["files"][rel] = rec
    m.unlink()
    m.write_text(json.dumps(d))


def sparse_file(p: Path, size: int, head: bytes = b"") -> None:
    with open(p, "wb") as f:
        f.write(head)
        f.truncate(size)


# ---- fixtures ------------------------------------------------------------------------------

def py() -> str:
    return sys.executable


def build_fixtures(fx: Path, merged: Path | str | None) -> dict:
    """The small inputs the probes damage copies of, built once under ``fx``; ``merged``:
    a merged calc model's folder, "build" (one built under ``fx``) or None."""
    fx.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = {"fx": fx}

    def once(path: Path, code: str) -> Path:
        if not path.exists():
            subprocess.run([py(), "-c", code], check=True, cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return path

    def cli(path: Path, *argv: str) -> Path:
        if not path.exists():
            subprocess.run([py(), "-m", "deltachip", *argv], check=True, cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL)
        return path
    out["tied"] = once(fx / "base-tied", "from pathlib import Path; from tests.merge.bases "
                       f"import make_base; make_base(Path('{fx}/base-tied'), tied=True, seed=1)")
    out["sharded"] = once(fx / "base-sharded", "from pathlib import Path; from tests.merge."
                          f"bases import make_base; make_base(Path('{fx}/base-sharded'), "
                          "tied=False, seed=3, shard_bytes=400_000)")
    out["qwen"] = once(fx / "base-qwen", "from pathlib import Path; from tests.merge.qwen35 "
                       f"import make_qwen_base; make_qwen_base(Path('{fx}/base-qwen'), "
                       "tied=True, seed=5)")
    out["counter"] = cli(fx / "counter", "compile", str(COUNTER), "-o", str(fx / "counter"))
    out["counter-q"] = cli(fx / "counter-q", "compile", str(COUNTER), "--target",
                           str(fx / "base-tied" / "config.json"), "-o", str(fx / "counter-q"))
    out["merged-counter"] = cli(fx / "merged-counter", "merge", str(fx / "base-tied"),
                                str(fx / "merged-counter"), "--chip", str(fx / "counter"))
    out["calc"] = cli(fx / "calc.elf", "firmware", "build", "calc", "-o", str(fx / "calc.elf"))
    if merged == "build":
        qbase = once(fx / "base-qwen-calc", "from pathlib import Path; from tests.merge.qwen35 "
                     f"import make_qwen_base; make_qwen_base(Path('{fx}/base-qwen-calc'), "
                     "tied=True, seed=7)")
        merged = cli(fx / "merged-calc", "merge", str(qbase), str(fx / "merged-calc"),
                     "--firmware", "calc", "--target", "compact")
    out["merged"] = merged
    return out


# ---- the catalogue -------------------------------------------------------------------------

def catalogue(fx: dict) -> list[Probe]:
    P: list[Probe] = []
    tied, sharded, qwen = fx["tied"], fx["sharded"], fx["qwen"]
    counter, counter_q, calc = fx["counter"], fx["counter-q"], fx["calc"]
    merged = fx["merged"]

    # ---- merge: a damaged base -------------------------------------------------------
    def base_setup(src: Path, rel: str, kind: str):
        def setup(d: Path):
            copy_tree(src, d / "base")
            if kind in JSON_KINDS:
                write_json_kind(d / "base" / rel, kind)
            else:
                damage(d / "base" / rel, kind)
        return setup

    merge_argv = ["merge", "{D}/base", "{D}/out", "--chip", str(counter)]
    for rel in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "generation_config.json", "chat_template.jinja"]:
        for kind in FILE_KINDS:
            ok = (1, 2)
            if kind == "deleted" and rel != "config.json" or kind in UNSEEN or (
                    rel == "chat_template.jinja" and kind in ("empty", "tail")):
                ok = (0, 1, 2)          # optional files; damage nothing can show (no digest;
                #                         an empty template, NULs: still template text)
            P.append(Probe("merge", f"base {rel} {kind}", merge_argv,
                           base_setup(tied, rel, kind), ok=ok, names=rel,
                           outputs=("out",)))
    for rel in ["config.json", "tokenizer.json", "tokenizer_config.json",
                "generation_config.json", "model.safetensors.index.json"]:
        src = sharded if rel.startswith("model") else tied
        for kind in JSON_KINDS:
            P.append(Probe("merge", f"base {rel} {kind}", merge_argv,
                           base_setup(src, rel, kind), names=rel, outputs=("out",),
                           ok=(0, 1, 2) if kind == "json-nan" else (1, 2),
                           note="NaN: Python's JSON readers take it"))
    shard = "model-00004-of-00011.safetensors"
    for rel in ["model.safetensors.index.json", shard]:
        for kind in ["deleted", "fifo", "devzero", "trunc8", "trunc-half", "flip9", "tail",
                     "huge"]:
            P.append(Probe("merge", f"sharded base {rel} {kind}", merge_argv,
                           base_setup(sharded, rel, kind), names=rel.split("-of")[0],
                           outputs=("out",), ok=(0, 1, 2) if kind == "flip9" and
                           rel.endswith(".json") else (1, 2)))

    # config fields of the wrong type or value
    bad_values = {"str": "64", "float": 64.5, "neg": -1, "zero": 0, "null": None,
                  "list": [64], "bool": True, "huge": 10 ** 12}
    for fld in ["hidden_size", "num_hidden_layers", "vocab_size", "num_key_value_heads",
                "linear_conv_kernel_dim"]:
        for vname, v in bad_values.items():
            def setup(d, fld=fld, v=v):
                copy_tree(tied, d / "base")
                edit_json(d / "base" / "config.json", **{fld: v})
            P.append(Probe("merge", f"config {fld}={vname}", merge_argv, setup,
                           names="config.json", outputs=("out",)))
    for fld, v in [("model_type", 5), ("model_type", "llama"), ("architectures", "Qwen"),
                   ("architectures", []), ("layer_types", "linear_attention"),
                   ("layer_types", ["linear_attention"] * 3), ("layer_types", ["x"] * 4),
                   ("tie_word_embeddings", "yes"), ("rms_norm_eps", "tiny"),
                   ("rms_norm_eps", -1.0), ("dtype", "int8"), ("dtype", 5),
                   ("eos_token_id", "x"), ("rope_parameters", "x"),
                   ("text_config", 5), ("model_type", DROP), ("hidden_size", DROP),
                   ("vocab_size", 100)]:
        def setup(d, fld=fld, v=v):
            copy_tree(tied, d / "base")
            edit_json(d / "base" / "config.json", **{fld: v})
        vn = "dropped" if v is DROP else json.dumps(v)[:20]
        P.append(Probe("merge", f"config {fld}={vn}", merge_argv, setup,
                       names="config.json", outputs=("out",)))
    # tokenizer_config / generation_config fields
    for rel, fld, v in [("tokenizer_config.json", "chat_template", 5),
                        ("tokenizer_config.json", "eos_token", 5),
                        ("tokenizer_config.json", "added_tokens_decoder", []),
                        ("tokenizer_config.json", "model_max_length", "x"),
                        ("tokenizer_config.json", "tokenizer_class", "NoSuchTokenizer"),
                        ("generation_config.json", "eos_token_id", "x"),
                        ("generation_config.json", "max_new_tokens", -5),
                        ("generation_config.json", "chip_call_budget", "x")]:
        def setup(d, rel=rel, fld=fld, v=v):
            copy_tree(tied, d / "base")
            edit_json(d / "base" / rel, **{fld: v})
        P.append(Probe("merge", f"{rel} {fld}={json.dumps(v)}", merge_argv, setup,
                       ok=(0, 1, 2), names="", outputs=("out",),
                       note="copied as they are; 0 allowed"))

    # safetensors headers written by hand
    def st_setup(header, data=b"", raw=None):
        def setup(d):
            copy_tree(tied, d / "base")
            f = d / "base" / "model.safetensors"
            f.unlink()
            if raw is not None:
                f.write_bytes(raw)
                return
            h = json.dumps(header).encode()
            h += b" " * (-len(h) % 8)
            f.write_bytes(len(h).to_bytes(8, "little") + h + data)
        return setup
    t1 = {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}
    for name, setup in [
        ("len-huge", st_setup(None, raw=(1 << 62).to_bytes(8, "little") + b"{}")),
        ("len-zero", st_setup(None, raw=(0).to_bytes(8, "little"))),
        ("len-file", st_setup(None, raw=(24).to_bytes(8, "little") + b"{}" + b" " * 14)),
        ("not-json", st_setup(None, raw=(8).to_bytes(8, "little") + b"garbage!")),
        ("dtype-unknown", st_setup({"w": {**t1, "dtype": "X9"}}, b"\0" * 4)),
        ("shape-neg", st_setup({"w": {**t1, "shape": [-2]}}, b"\0" * 4)),
        ("offsets-past", st_setup({"w": {**t1, "data_offsets": [0, 400]}}, b"\0" * 4)),
        ("offsets-overlap", st_setup({"w": t1, "v": t1}, b"\0" * 4)),
        ("offsets-gap", st_setup({"w": {**t1, "data_offsets": [4, 8]}}, b"\0" * 8)),
        ("shape-mismatch", st_setup({"w": {**t1, "shape": [3]}}, b"\0" * 4)),
        ("meta-number", st_setup({"w": t1, "__metadata__": {"a": 1}}, b"\0" * 4)),
        ("header-array", st_setup([1, 2], b"")),
        ("wrong-tensors", st_setup({"w": t1}, b"\0" * 4)),
    ]:
        P.append(Probe("merge", f"base safetensors {name}", merge_argv, setup,
                       names="the weights hold" if name == "wrong-tensors"
                       else "model.safetensors", outputs=("out",)))

    # the chip directory
    def chip_setup(rel, kind):
        def setup(d):
            copy_tree(counter, d / "chip")
            if kind in JSON_KINDS:
                write_json_kind(d / "chip" / rel, kind)
            else:
                damage(d / "chip" / rel, kind)
        return setup
    chip_argv = ["merge", str(tied), "{D}/out", "--chip", "{D}/chip"]
    for rel in ["chip.json", "manifest.json", "model.safetensors", "config.json"]:
        for kind in ["deleted", "dir", "fifo", "devzero", "trunc-half", "flip-mid", "tail",
                     "huge", "json-deep"]:
            if kind.startswith("json") and rel == "model.safetensors":
                continue
            P.append(Probe("merge", f"chip {rel} {kind}", chip_argv, chip_setup(rel, kind),
                           names=rel, outputs=("out",)))

    # OUT_DIR rules and options
    def prev_merge(extra=None):
        def setup(d):
            copy_tree(fx["merged-counter"], d / "out")
            if extra:
                extra(d)
        return setup
    outs = [
        ("out = base", ["merge", "{D}/base", "{D}/base", "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "base"), (2,), "OUT_DIR", ()),
        ("out inside base", ["merge", "{D}/base", "{D}/base/sub", "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "base"), (2,), "OUT_DIR", ()),
        ("base inside out", ["merge", "{D}/o/base", "{D}/o", "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "o" / "base"), (2,), "OUT_DIR", ()),
        ("out = chip", ["merge", str(tied), "{D}/chip", "--chip", "{D}/chip"],
         lambda d: copy_tree(counter, d / "chip"), (2,), "OUT_DIR", ()),
        ("out a user folder", merge_argv[:2] + ["{D}/mine", "--chip", str(counter)],
         lambda d: (copy_tree(tied, d / "base"), (d / "mine").mkdir(),
                    (d / "mine" / "notes.txt").write_text("mine")), (2,), "OUT_DIR", ()),
        ("out a file", merge_argv[:2] + ["{D}/f", "--chip", str(counter)],
         lambda d: (copy_tree(tied, d / "base"), (d / "f").write_text("mine")), (2,),
         "OUT_DIR", ()),
        ("out a fifo", merge_argv[:2] + ["{D}/f", "--chip", str(counter)],
         lambda d: (copy_tree(tied, d / "base"), os.mkfifo(d / "f")), (2,), "OUT_DIR", ()),
        ("out /dev/null", merge_argv[:2] + ["/dev/null", "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "base"), (2,), "OUT_DIR", ()),
        ("out dot", ["merge", "base", ".", "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "base"), (2,), "OUT_DIR", ()),
        ("out dotdot", ["merge", "base", "..", "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "base"), (2,), "OUT_DIR", ()),
        ("out under a file", merge_argv[:2] + ["{D}/f/out", "--chip", str(counter)],
         lambda d: (copy_tree(tied, d / "base"), (d / "f").write_text("x")), (1, 2), "f", ()),
        ("out name 255", merge_argv[:2] + ["{D}/" + "n" * 255, "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "base"), (0,), None, ("n" * 255,)),
        ("out name 256", merge_argv[:2] + ["{D}/" + "n" * 256, "--chip", str(counter)],
         lambda d: copy_tree(tied, d / "base"), (1, 2), "n" * 40, ()),
        ("out a symlink to base", merge_argv[:2] + ["{D}/ln", "--chip", str(counter)],
         lambda d: (copy_tree(tied, d / "base"), (d / "ln").symlink_to("base")), (2,),
         "OUT_DIR", ()),
        ("out a dangling symlink", merge_argv[:2] + ["{D}/ln", "--chip", str(counter)],
         lambda d: (copy_tree(tied, d / "base"), (d / "ln").symlink_to("nowhere")), (1, 2),
         "ln", ()),
        ("out a previous merge", merge_argv, lambda d: (copy_tree(tied, d / "base"),
                                                          prev_merge()(d)), (0,), None,
         ("out",)),
        ("out a previous merge plus a user file", merge_argv,
         lambda d: (copy_tree(tied, d / "base"), prev_merge(
             lambda d: (d / "out" / "notes.txt").write_text("mine"))(d)), (2,), "OUT_DIR",
         ()),
        ("out a previous merge, manifest devzero", merge_argv,
         lambda d: (copy_tree(tied, d / "base"), prev_merge(
             lambda d: damage(d / "out" / "deltachip.json", "devzero"))(d)), (2,), "OUT_DIR",
         ()),
        ("out a previous merge, manifest json-deep", merge_argv,
         lambda d: (copy_tree(tied, d / "base"), prev_merge(
             lambda d: write_json_kind(d / "out" / "deltachip.json", "json-deep"))(d)),
         (2,), "OUT_DIR", ()),
        ("base a file", ["merge", "{D}/f", "{D}/out", "--chip", str(counter)],
         lambda d: (d / "f").write_text("x"), (2,), "f", ()),
        ("base /dev/zero", ["merge", "/dev/zero", "{D}/out", "--chip", str(counter)],
         None, (2,), "/dev/zero", ()),
        ("base empty dir", ["merge", "{D}/b", "{D}/out", "--chip", str(counter)],
         lambda d: (d / "b").mkdir(), (2,), "b", ()),
        ("base loop", ["merge", "{D}/b", "{D}/out", "--chip", str(counter)],
         lambda d: (d / "b").symlink_to("b"), (2,), "b", ()),
        ("chip a file", ["merge", str(tied), "{D}/out", "--chip", "{D}/f"],
         lambda d: (d / "f").write_text("x"), (2,), "f", ()),
        ("chip /dev/zero", ["merge", str(tied), "{D}/out", "--chip", "/dev/zero"],
         None, (2,), "/dev/zero", ()),
        ("chip a merged model", ["merge", str(tied), "{D}/out", "--chip",
                                 str(fx["merged-counter"])], None, (2,), "", ()),
        ("dtype fp32 for a bf16 chip", merge_argv + ["--dtype", "fp32"],
         lambda d: copy_tree(tied, d / "base"), (2,), "dtype", ()),
        ("stock layout, compact chip", merge_argv + ["--layout", "stock"],
         lambda d: copy_tree(tied, d / "base"), (2,), "", ()),
        ("tables plain", merge_argv + ["--tables", "plain"],
         lambda d: copy_tree(tied, d / "base"), (0,), None, ("out",)),
        ("firmware /dev/zero", merge_argv[:3] + ["--firmware", "/dev/zero"],
         lambda d: copy_tree(tied, d / "base"), (2,), "/dev/zero", ()),
        ("firmware a dir", merge_argv[:3] + ["--firmware", "{D}"],
         lambda d: copy_tree(tied, d / "base"), (2,), "", ()),
        ("firmware unknown name", merge_argv[:3] + ["--firmware", "nosuchprogram"],
         lambda d: copy_tree(tied, d / "base"), (2,), "nosuchprogram", ()),
        ("firmware garbage elf", merge_argv[:3] + ["--firmware", "{D}/x.elf"],
         lambda d: (copy_tree(tied, d / "base"), (d / "x.elf").write_bytes(b"\x7fELF" + b"\0" * 60)),
         (2,), "x.elf", ()),
        ("firmware truncated calc", merge_argv[:3] + ["--firmware", "{D}/x.elf"],
         lambda d: (copy_tree(tied, d / "base"), (d / "x.elf").write_bytes(
             calc.read_bytes()[:5000])), (2,), "x.elf", ()),
        ("firmware with --chip", merge_argv + ["--firmware", "calc"],
         lambda d: copy_tree(tied, d / "base"), (2,), "", ()),
        ("target with --chip", merge_argv + ["--target", "compact"],
         lambda d: copy_tree(tied, d / "base"), (2,), "", ()),
        ("base non-utf8 name", ["merge", b"{D}/b\xff", "{D}/out", "--chip", str(counter)],
         None, (2,), "UTF-8", ()),
    ]
    for name, argv, setup, ok, names, outputs in outs:
        P.append(Probe("merge", name, argv, setup, ok=ok, names=names, outputs=outputs))
    # the stock layout on damaged bases
    stock_argv = ["merge", "{D}/base", "{D}/out", "--chip", str(counter_q), "--layout", "stock"]
    for rel, kind in [("config.json", "json-invalid"), ("config.json", "trunc-half"),
                      ("model.safetensors", "trunc-half"), ("model.safetensors", "tail"),
                      ("model.safetensors", "flip0"), ("tokenizer.json", "devzero"),
                      ("tokenizer.json", "json-deep"), ("tokenizer_config.json", "fifo")]:
        P.append(Probe("merge", f"stock base {rel} {kind}", stock_argv,
                       base_setup(tied, rel, kind), names=rel, outputs=("out",)))
    # the Qwen tokenizer base
    q_argv = ["merge", "{D}/base", "{D}/out", "--chip", str(counter)]
    for rel, kind in [("tokenizer.json", "trunc-half"), ("tokenizer.json", "flip-mid"),
                      ("tokenizer.json", "json-bigint"), ("tokenizer_config.json", "trunc-half"),
                      ("tokenizer_config.json", "json-array"), ("chat_template.jinja", "notutf8"),
                      ("config.json", "flip-mid")]:
        P.append(Probe("merge", f"qwen base {rel} {kind}", q_argv,
                       base_setup(qwen, rel, kind), ok=(1, 2) if "chat_template" not in rel
                       and kind not in UNSEEN else (0, 1, 2),
                       names=rel if "chat_template" not in rel else "",
                       outputs=("out",)))

    # ---- chat and run --model on a damaged merged calc model -------------------------
    if merged is not None:
        def model_setup(rel, kind, record=False):
            def setup(d):
                copy_tree(merged, d / "m")
                if kind in JSON_KINDS:
                    write_json_kind(d / "m" / rel, kind)
                else:
                    damage(d / "m" / rel, kind)
                if record:
                    rerecord(d / "m", rel)
            return setup
        chat_argv = ["chat", "{D}/m", "--prompt", "What is 2+3?", "--max-new-tokens", "40"]
        files = ["config.json", "deltachip.json", "modeling_deltachip.py", "tokenizer.json",
                 "tokenizer_config.json", "generation_config.json", "chat_template.jinja",
                 "deltachip/chip.json", "model-00001-of-00012.safetensors",
                 "model-00012-of-00012.safetensors"]
        for rel in files:
            for kind in FEW_KINDS:
                if kind == "flip-mid" and rel.endswith(".safetensors"):
                    kind = "flip9"          # in the header (data: size-checked only)
                # a byte of the manifest itself flipped: the file whose record no longer
                # matches is named (the manifest has no digest of its own)
                P.append(Probe("chat", f"model {rel} {kind}", chat_argv,
                               model_setup(rel, kind), names=rel.split("/")[-1]
                               if (rel, kind) != ("deltachip.json", "flip-mid") else None,
                               timeout=180))
        for rel in ["deltachip.json", "config.json", "tokenizer_config.json",
                    "generation_config.json"]:
            for kind in ["json-deep", "json-bigint"]:
                P.append(Probe("chat", f"model {rel} {kind}", chat_argv,
                               model_setup(rel, kind), names=rel, timeout=180))
        # consistently damaged: the digests re-recorded, so only the reader can tell
        for rel, fld, v in [("config.json", "chip_token_offset", "x"),
                            ("config.json", "chip_token_offset", -5),
                            ("config.json", "vocab_size", 5),
                            ("config.json", "chip_config", None),
                            ("config.json", "base_config", 5),
                            ("config.json", "auto_map", None),
                            ("generation_config.json", "chip_call_budget", "x"),
                            ("generation_config.json", "chip_call_budget", -1),
                            ("generation_config.json", "eos_token_id", "x"),
                            ("tokenizer_config.json", "chat_template", 5),
                            ("tokenizer_config.json", "added_tokens_decoder", []),
                            ("tokenizer_config.json", "eos_token", 5)]:
            def setup(d, rel=rel, fld=fld, v=v):
                copy_tree(merged, d / "m")
                edit_json(d / "m" / rel, **{fld: v})
                rerecord(d / "m", rel)
            # the model's chat_template.jinja wins over tokenizer_config's field
            ok = (0, 1, 2) if fld == "chat_template" else (1, 2)
            P.append(Probe("chat", f"re-recorded {rel} {fld}={json.dumps(v)}", chat_argv,
                           setup, names=rel if ok == (1, 2) else None, ok=ok, timeout=180))
        for name, code in [("syntax error", b"def (:\n"), ("raises", b"raise SystemExit(0)\n"),
                           ("empty", b"")]:
            def setup(d, code=code):
                copy_tree(merged, d / "m")
                f = d / "m" / "modeling_deltachip.py"
                f.unlink()
                f.write_bytes(code)
                rerecord(d / "m", "modeling_deltachip.py")
            P.append(Probe("chat", f"re-recorded modeling file {name}", chat_argv, setup,
                           names="modeling_deltachip.py", timeout=180))
        for fld, v in [("layout", 5), ("layout", "other"), ("format_version", 99),
                       ("files", []), ("files", {"config.json": 5}),
                       ("files", {"config.json": {"bytes": "x"}}),
                       ("files", {"../../../etc/passwd": {"bytes": 1}}),
                       ("bridge", "x"), ("bridge", None), ("dtype", "fp64"), ("dtype", 5),
                       ("chip", None), ("firmware", None), ("tokens", None),
                       ("format", "x")]:
            def setup(d, fld=fld, v=v):
                copy_tree(merged, d / "m")
                edit_json(d / "m" / "deltachip.json", **{fld: v})
            # the firmware section only records the program: chat does not need it
            P.append(Probe("chat", f"manifest {fld}={json.dumps(v)[:30]}", chat_argv, setup,
                           names="", timeout=180, ok=(0, 1, 2) if fld == "firmware"
                           else (1, 2)))
        # prompts, standard input, options
        link = lambda d: copy_tree(merged, d / "m")         # noqa: E731
        call = ('<tool_call>\n<function=calc>\n<parameter=expression>\n{}\n</parameter>\n'
                '</function>\n</tool_call>')
        m_argv = ["chat", "{D}/m"]
        for name, argv, stdin, ok, names, timeout in [
            ("prompt 65,537 chars", m_argv + ["--prompt", "x" * 65_537], None, (2,),
             "--prompt", 120),
            ("assistant-start 65,537 chars", m_argv + ["--prompt", "hi", "--assistant-start",
                                                       "x" * 65_537], None, (2,),
             "--assistant-start", 120),
            ("prompt not UTF-8", m_argv + ["--prompt", b"2+\xff"], None, (2,), "--prompt", 120),
            ("assistant-start not UTF-8", m_argv + ["--prompt", "hi", "--assistant-start",
                                                    b"\xc3"], None, (2,), "--assistant-start",
             120),
            ("stdin /dev/zero", m_argv, "/dev/zero", (2,), "standard input", 120),
            ("stdin not UTF-8", m_argv, b"2+3\n\xff\xfe\n", None, "standard input", 120),
            ("stdin 2 MB", m_argv, b"What is 1+1?\n" * 200_000, (2,), "standard input", 120),
            ("stdin a line of 70,000 chars", m_argv, b"x" * 70_000 + b"\n", (2,),
             "standard input", 120),
            ("max-new-tokens 0", m_argv + ["--prompt", "hi", "--max-new-tokens", "0"], None,
             (2,), "--max-new-tokens", 120),
            ("max-new-tokens x", m_argv + ["--prompt", "hi", "--max-new-tokens", "x"], None,
             (2,), "--max-new-tokens", 120),
            ("call-budget -1", m_argv + ["--prompt", "hi", "--call-budget=-1"], None, (2,),
             "--call-budget", 120),
            ("call-budget 1e9999", m_argv + ["--prompt", "hi", "--call-budget", "9" * 5000],
             None, (2,), "--call-budget", 120),
            ("stdout closed", m_argv + ["--prompt", "hi"], None, (2,), "standard output", 120),
            ("empty stdin", m_argv, b"", (0,), None, 240),
            ("call-budget 1, a call", m_argv + ["--prompt", "x", "--max-new-tokens", "3",
                                                "--call-budget", "1", "--assistant-start",
                                                call.format("2**100")], None, (0,), None, 240),
            ("a call too long", m_argv + ["--prompt", "x", "--max-new-tokens", "3",
                                          "--assistant-start", call.format("1+" * 700 + "1")],
             None, (0,), None, 240),
            ("a malformed call", m_argv + ["--prompt", "x", "--max-new-tokens", "3",
                                           "--assistant-start",
                                           "<tool_call>\n<function=calc>\n<parameter=x>\n"
                                           "</function>\n</tool_call>"], None, (0,), None, 240),
            ("a call calc refuses", m_argv + ["--prompt", "x", "--max-new-tokens", "3",
                                              "--assistant-start", call.format("1/0")], None,
             (0,), None, 240),
        ]:
            call_probe = "--assistant-start" in argv and "call" in name
            P.append(Probe("chat", name, argv + (["--show-trace"] if call_probe else []),
                           link, ok=ok if ok else (2,), names=names, stdin=stdin,
                           timeout=timeout, forbid=(" None",) if call_probe else (),
                           shell_tail=">&-" if name == "stdout closed" else ""))

        # run --model
        run_argv = ["run", str(calc), "--engine", "fast", "--model", "{D}/m", "--input", "2+3"]
        for rel in ["deltachip.json", "config.json", "modeling_deltachip.py",
                    "deltachip/chip.json", "deltachip/roms/code.hex",
                    "model.safetensors.index.json", "model-00012-of-00012.safetensors"]:
            for kind in ["deleted", "fifo", "devzero", "trunc-half", "huge", "json-invalid"]:
                if kind.startswith("json") and not rel.endswith(".json"):
                    continue
                ok = (1, 2)
                if rel in ("modeling_deltachip.py",):
                    ok = (0, 1, 2)          # the fast engine does not run the modeling file
                P.append(Probe("run --model", f"fast, model {rel} {kind}", run_argv,
                               model_setup(rel, kind), ok=ok, names=rel.split("/")[-1],
                               timeout=180))
        hf_argv = ["run", str(calc), "--engine", "hf", "--model", "{D}/m", "--input", "2",
                   "--max-steps", "1"]
        for rel, kind in [("modeling_deltachip.py", "trunc-half"),
                          ("modeling_deltachip.py", "deleted"), ("config.json", "json-deep"),
                          ("model-00001-of-00012.safetensors", "trunc-half"),
                          ("tokenizer.json", "devzero")]:
            P.append(Probe("run --model", f"hf, model {rel} {kind}", hf_argv,
                           model_setup(rel, kind), ok=(1, 2) if rel != "tokenizer.json"
                           else (0, 1, 2, 124), names=rel if rel != "tokenizer.json" else None,
                           timeout=240))
        for name, argv, setup, ok, names in [
            ("model missing", ["run", str(calc), "--engine", "fast", "--model", "{D}/none"],
             None, (2,), "none"),
            ("model a file", ["run", str(calc), "--engine", "fast", "--model", "{D}/f"],
             lambda d: (d / "f").write_text("x"), (2,), "f"),
            ("model /dev/zero", ["run", str(calc), "--engine", "fast", "--model", "/dev/zero"],
             None, (2,), "/dev/zero"),
            ("model a fifo", ["run", str(calc), "--engine", "fast", "--model", "{D}/f"],
             lambda d: os.mkfifo(d / "f"), (2,), "f"),
            ("model a chip dir", ["run", str(calc), "--engine", "fast", "--model",
                                  str(counter)], None, (2,), "counter"),
            ("model a base", ["run", str(calc), "--engine", "fast", "--model", str(tied)],
             None, (2,), "base-tied"),
            ("model merged without firmware", ["run", str(calc), "--engine", "fast",
                                               "--model", str(fx["merged-counter"])], None,
             (2,), "merged-counter"),
            ("model with engine ref", ["run", str(calc), "--model", "{D}/m"], link, (2,),
             "--model"),
            ("model with --target", ["run", str(calc), "--engine", "fast", "--model", "{D}/m",
                                     "--target", "compact"], link, (2,), "--target"),
            ("model a loop", ["run", str(calc), "--engine", "fast", "--model", "{D}/l"],
             lambda d: (d / "l").symlink_to("l"), (2,), "l"),
            ("model, input from stdin", ["run", "{D}/h.elf", "--engine", "fast", "--model",
                                      "{D}/m"], lambda d: (link(d), shutil.copy(
                                          calc, d / "h.elf")), (0, 1), None),
        ]:
            P.append(Probe("run --model", name, argv, setup, ok=ok, names=names, timeout=180,
                           stdin=b"1+1\n" if "stdin" in name else None))
        # --inputs on the merged model
        for name, data, ok, names in [
            ("inputs 40 lines on fast", b"1+1\n" * 40, (0,), None),
            ("inputs a calc error among lines", b"1+1\n1/0\n2**10\n", (1, 2, 3), None),
            ("inputs a line over the buffer", b"1+1\n" + b"1" * 2000 + b"\n", (2,), "in.txt"),
        ]:
            def setup(d, data=data):
                link(d)
                (d / "in.txt").write_bytes(data)
            P.append(Probe("run --inputs", f"--model fast: {name}",
                           ["run", str(calc), "--engine", "fast", "--model", "{D}/m",
                            "--inputs", "{D}/in.txt"], setup, ok=ok, names=names, timeout=300,
                           program=names is None))

    # ---- run --inputs on ref -----------------------------------------------------------
    def inputs_setup(make):
        def setup(d):
            make(d / "in.txt")
        return setup
    in_argv = ["run", str(calc), "--inputs", "{D}/in.txt"]
    for name, make, ok, names in [
        ("missing", lambda p: None, (2,), "in.txt"),
        ("a dir", lambda p: p.mkdir(), (2,), "in.txt"),
        ("a fifo, written", lambda p: feed_fifo(p, b"1+1\n2*3\n"), (0,), None),
        ("/dev/zero", lambda p: p.symlink_to("/dev/zero"), (2,), "in.txt"),
        ("a loop", lambda p: p.symlink_to(p.name), (2,), "in.txt"),
        ("sparse 100 MB", lambda p: sparse_file(p, 100 << 20, b"1+1\n"), (2,), "in.txt"),
        ("empty", lambda p: p.write_bytes(b""), (2,), "in.txt"),
        ("only newlines", lambda p: p.write_bytes(b"\n" * 300), (0, 1, 2, 3), None),
        ("not UTF-8", lambda p: p.write_bytes(b"1+\xff\n2\n"), (0, 1, 2, 3), None),
        ("NUL bytes", lambda p: p.write_bytes(b"1+\x001\n"), (0, 1, 2, 3), None),
        ("CRLF", lambda p: p.write_bytes(b"1+1\r\n2+2\r\n"), (0,), None),
        ("no final newline", lambda p: p.write_bytes(b"1+1\n2+2"), (0,), None),
        ("a line of 1,024 bytes", lambda p: p.write_bytes(b"1" * 1024 + b"\n"), (2,), "in.txt"),
        ("a line of 1 MB", lambda p: p.write_bytes(b"1" * (1 << 20) + b"\n"), (2,), "in.txt"),
        # ref runs a line at a time (about 0.1 s each here): 600 lines, not millions
        ("600 lines", lambda p: p.write_bytes(b"7*6\n" * 600), (0,), None),
        ("calc errors", lambda p: p.write_bytes(b"1/0\n2**99999\n((((\n"), (1, 2, 3), None),
        ("64 MiB + 1 byte", lambda p: sparse_file(p, (64 << 20) + 1, b"1+1\n"), (2,),
         "in.txt"),
    ]:
        P.append(Probe("run --inputs", f"ref: {name}", in_argv, inputs_setup(make), ok=ok,
                       names=names, timeout=240, program=names is None))
    for name, argv, ok, names in [
        ("with --input", in_argv + ["--input", "1"], (2,), "--input"),
        ("threads 0", in_argv + ["--threads", "0"], (2,), "--threads"),
        ("engine sim", ["run", str(calc), "--engine", "sim", "--inputs", "{D}/in.txt"],
         (0,), None),
        ("stats to /dev/full", in_argv + ["--stats", "/dev/full"], (1, 2), "/dev/full"),
        ("stats to a dir", in_argv + ["--stats", "{D}"], (1, 2), ""),
        ("stats to the inputs file", in_argv + ["--stats", "{D}/in.txt"], (1, 2), "in.txt"),
        ("stats to the program", ["run", "{D}/p.elf", "--inputs", "{D}/in.txt", "--stats",
                                  "{D}/p.elf"], (1, 2), "p.elf"),
        ("trace to the program", ["run", "{D}/p.elf", "--input", "1", "--trace", "{D}/p.elf"],
         (1, 2), "p.elf"),
        ("trace to a fifo", ["run", str(calc), "--input", "1", "--trace", "{D}/fifo"], (1, 2),
         "fifo"),
        ("stdout /dev/full", in_argv, (1,), "standard output"),
    ]:
        def setup(d, name=name):
            (d / "in.txt").write_bytes(b"1+1\n2*3\n")
            shutil.copy(calc, d / "p.elf")
            if "fifo" in name:
                os.mkfifo(d / "fifo")
        P.append(Probe("run --inputs", f"ref: {name}", argv, setup, ok=ok, names=names,
                       timeout=240, shell_tail=">/dev/full" if "stdout" in name else ""))
    # the program itself, and standard input
    for kind in ["trunc8", "trunc-half", "flip0", "flip9", "tail", "fifo-fed", "dir",
                 "devzero", "loop", "huge"]:
        def setup(d, kind=kind):
            shutil.copy(calc, d / "p.elf")
            damage(d / "p.elf", kind)
        P.append(Probe("run --inputs", f"ref: program {kind}", ["run", "{D}/p.elf", "--input",
                                                                 "1+1"], setup,
                       # bytes past the last section, or in the ELF ident's padding
                       # (byte 9): nothing reads them
                       ok=(0, 1, 2, 3) if kind in ("tail", "flip9", "fifo-fed") else (2,),
                       names="p.elf", program=kind == "fifo-fed"))
    for name, stdin, ok in [("stdin not UTF-8", b"1+\xff\xfe\n", (0, 1, 2, 3)),
                            ("stdin 2 KB", b"1" * 2048, (2,))]:
        P.append(Probe("run --inputs", f"ref: {name}", ["run", str(calc)], None, ok=ok,
                       names="standard input" if ok == (2,) else None, stdin=stdin,
                       program=ok != (2,)))

    # ---- the core cache -----------------------------------------------------------------
    cache_argv = ["run", str(calc), "--engine", "fast", "--input", "1"]
    for name, make in [
        ("a file", lambda d: (d / "c").write_text("x")),
        ("/dev/null", None),
        ("a fifo", lambda d: os.mkfifo(d / "c")),
        ("a loop", lambda d: (d / "c").symlink_to("c")),
        ("a dangling symlink", lambda d: (d / "c").symlink_to("/nonexistent/deep/x")),
        ("cores a file", lambda d: ((d / "c").mkdir(), (d / "c" / "cores").write_text("x"))),
        ("cores a fifo", lambda d: ((d / "c").mkdir(), os.mkfifo(d / "c" / "cores"))),
        ("cores a loop", lambda d: ((d / "c").mkdir(), (d / "c" / "cores").symlink_to(
            "cores"))),
        ("sim a file", lambda d: ((d / "c").mkdir(), (d / "c" / "sim").write_text("x"))),
    ]:
        where = "/dev/null" if make is None else "{D}/c"
        sim_argv = ["sim", str(COUNTER), "--engine", "c", "--steps", "2"]
        # never a run that could reach a core compile: cores/ broken for run, sim/ for sim
        uses = ([cache_argv] if name.startswith("cores") else [sim_argv]
                if name.startswith("sim") else [cache_argv, sim_argv])
        for argv in uses:
            P.append(Probe("core cache", f"DELTACHIP_CACHE {name}: {argv[0]}", argv, make,
                           ok=(2,), names="DELTACHIP_CACHE", env={"DELTACHIP_CACHE": where}))

    # ---- the front end ------------------------------------------------------------------
    def src_setup(make):
        def setup(d):
            shutil.copy(COUNTER, d / "c.hdl")
            make(d / "c.hdl")
        return setup
    # a source has no digest: its last byte (a newline) cut or a byte flipped mid-file (in
    # a comment, a name) may leave a valid circuit
    fe_kinds: list = [(k, (lambda k: lambda p: damage(p, k))(k),
                       (0,) if k == "fifo-fed" else (0, 1, 2) if k in ("trunc-1", "flip-mid")
                       else (1, 2), None if k == "fifo-fed" else "c.hdl")
                      for k in ["deleted", "dir", "fifo-fed", "devzero", "loop", "dangling",
                                "empty", "trunc1", "trunc-half", "trunc-1", "flip0",
                                "flip-mid", "huge", "notutf8"]]
    fe_kinds += [
        ("NUL bytes", lambda p: p.write_bytes(b"\0" * 100 + p.read_bytes()), (2,), "c.hdl"),
        ("deep parens", lambda p: p.write_text(p.read_text().replace(
            "tok.Count.value + 1", "(" * 50_000 + "1" + ")" * 50_000)), (0, 2), "c.hdl"),
        ("deep ifs", lambda p: p.write_text(p.read_text().replace(
            "next = Done(); }", "if 1 == 1 { " * 20_000 + "next = Done();" + " }" * 20_000
            + " }", 1)), (2,), "c.hdl"),
        ("a 4 MB line", lambda p: p.write_text("// " + "x" * (4 << 20) + "\n" + p.read_text()),
         (0,), None),
        ("import /dev/zero", lambda p: p.write_text('import "/dev/zero";\n' + p.read_text()),
         (2,), "/dev/zero"),
        ("import a fifo, written", lambda p: (feed_fifo(p.with_name("f.hdl"), b""),
                                              p.write_text('import "f.hdl";\n' + p.read_text())),
         (0, 2), "f.hdl"),
        ("import itself", lambda p: p.write_text('import "c.hdl";\n' + p.read_text()),
         (0, 2), None),
        ("import a dir", lambda p: (p.with_name("d.hdl").mkdir(), p.write_text(
            'import "d.hdl";\n' + p.read_text())), (2,), "d.hdl"),
        ("10,000 tokens declared", lambda p: p.write_text(p.read_text().replace(
            "token Done halt;", "token Done halt;\n" + "".join(
                f"token T{i};\n" for i in range(10_000)))), (0, 1, 2), None),
        ("a u64 field", lambda p: p.write_text(p.read_text().replace("u8", "u64")), (0, 2),
         None),
    ]
    for name, make, ok, names in fe_kinds:
        for cmd in (["sim", "{D}/c.hdl", "--steps", "3"],
                    ["compile", "{D}/c.hdl", "-o", "{D}/out"]):
            P.append(Probe("front end", f"{cmd[0]}: source {name}", cmd, src_setup(make),
                           ok=ok, names=names, outputs=("out",), timeout=180))
    for name, argv, setup, ok, names, outputs in [
        ("vcd over the source", ["sim", "{D}/c.hdl", "--steps", "2", "--vcd", "{D}/c.hdl"],
         None, (1, 2), "c.hdl", ()),
        ("vcd to /dev/full", ["sim", "{D}/c.hdl", "--steps", "2", "--vcd", "/dev/full"], None,
         (1, 2), "/dev/full", ()),
        ("vcd to a dir", ["sim", "{D}/c.hdl", "--steps", "2", "--vcd", "{D}"], None, (1, 2),
         "", ()),
        ("vcd to a fifo", ["sim", "{D}/c.hdl", "--steps", "2", "--vcd", "{D}/f"],
         lambda d: os.mkfifo(d / "f"), (1, 2), "f", ()),
        ("compile over the source", ["compile", "{D}/c.hdl", "-o", "{D}/c.hdl"], None, (1, 2),
         "c.hdl", ()),
        ("compile into a user folder", ["compile", "{D}/c.hdl", "-o", "{D}/mine"],
         lambda d: ((d / "mine").mkdir(), (d / "mine" / "a.txt").write_text("x")), (1, 2),
         "mine", ()),
        ("compile -o /dev/null", ["compile", "{D}/c.hdl", "-o", "/dev/null"], None, (1, 2),
         "/dev/null", ()),
        ("compile -o name 256", ["compile", "{D}/c.hdl", "-o", "{D}/" + "n" * 256], None,
         (1, 2), "n" * 40, ()),
        ("compile --target /dev/zero", ["compile", "{D}/c.hdl", "--target", "/dev/zero", "-o",
                                        "{D}/out"], None, (2,), "/dev/zero", ()),
        ("compile --target a bad config", ["compile", "{D}/c.hdl", "--target", "{D}/t.json",
                                           "-o", "{D}/out"],
         lambda d: (d / "t.json").write_text('{"hidden_size": "x"}'), (2,), "t.json", ()),
        ("sim --rom a fifo", ["sim", str(STACK), "--rom", "prog={D}/f", "--steps", "2"],
         lambda d: feed_fifo(d / "f", b"00\n"), (0, 2), "f", ()),
        ("sim --steps huge", ["sim", "{D}/c.hdl", "--steps", "9" * 30], None, (0, 2), None,
         ()),
        ("sim stdout closed", ["sim", "{D}/c.hdl", "--steps", "2"], None, (2,),
         "standard output", ()),
        ("sim stdout /dev/full", ["sim", "{D}/c.hdl", "--steps", "2"], None, (1, 2),
         "standard output", ()),
    ]:
        def full(d, setup=setup):
            shutil.copy(COUNTER, d / "c.hdl")
            if setup:
                setup(d)
        tail = ">&-" if "closed" in name else ">/dev/full" if "stdout /dev/full" in name else ""
        P.append(Probe("front end", name, argv, full, ok=ok, names=names, outputs=outputs,
                       shell_tail=tail))
    # check / explain on a damaged chip directory
    for rel in ["chip.json", "manifest.json", "model.safetensors", "config.json"]:
        for kind in ["deleted", "fifo", "devzero", "flip-mid", "tail"]:
            def setup(d, rel=rel, kind=kind):
                copy_tree(counter, d / "chip")
                damage(d / "chip" / rel, kind)
            # explain reads chip.json alone (the circuit, its trace): the weights, the config
            # and the digests are not its inputs
            ok = (1, 2) if rel == "chip.json" else (0, 1, 2)
            P.append(Probe("front end", f"explain: chip {rel} {kind}",
                           ["explain", "{D}/chip", "--layer", "0"], setup, ok=ok,
                           names=rel if ok == (1, 2) else None))
    for rel, kind in [("chip.json", "flip-mid"), ("model.safetensors", "flip-mid"),
                      ("model.safetensors", "tail"), ("config.json", "json-deep")]:
        def setup(d, rel=rel, kind=kind):
            copy_tree(counter, d / "chip")
            if kind in JSON_KINDS:
                write_json_kind(d / "chip" / rel, kind)
            else:
                damage(d / "chip" / rel, kind)
        P.append(Probe("front end", f"check: chip {rel} {kind}",
                       ["check", "{D}/chip", "--steps", "4"], setup, names=rel, timeout=180))
    return P


# ---- running and judging -------------------------------------------------------------------

def snapshot(root: Path, skip: tuple = (), digest_limit: int = 16 << 20) -> dict:
    """path -> (kind, size, mtime_ns, sha256 of regular files up to ``digest_limit`` bytes)
    under ``root``."""
    out = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir.parts and rel_dir.parts[0] in skip:
            dirnames[:] = []
            continue
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            if rel.split("/")[0] in skip:
                continue
            st = os.lstat(p)
            rec: tuple = (stat.S_IFMT(st.st_mode),)
            if stat.S_ISREG(st.st_mode):
                digest = ""
                if st.st_size <= digest_limit:
                    with open(p, "rb") as f:
                        digest = hashlib.sha256(f.read()).hexdigest()
                rec += (st.st_size, st.st_mtime_ns, digest)
            elif stat.S_ISLNK(st.st_mode):
                rec += (os.readlink(p),)
            out[rel] = rec
    return out


def _argv(p: Probe, d: Path) -> list:
    out = []
    for a in p.argv:
        if isinstance(a, bytes):
            out.append(a.replace(b"{D}", str(d).encode()))
        else:
            out.append(a.replace("{D}", str(d)))
    return out


#: the largest file a probe may write (a safety net: no probe should compile the core)
FSIZE_CAP = 2 << 30


def _preexec():
    resource.setrlimit(resource.RLIMIT_AS, (MEM_CAP, MEM_CAP))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_CAP, FSIZE_CAP))
    os.setsid()


#: a front-end diagnostic's first line (``FILE:LINE:COL: error: ...``; the source line and
#: a caret follow it)
DIAGNOSTIC = re.compile(r"\S.*:\d+:\d+: (error|warning): ")


def named(text: str, lines: list[str]) -> bool:
    """Whether stderr ``lines`` name ``text``: in its last line, or in the first line of a
    diagnostic among the last few."""
    return bool(lines) and (text in lines[-1] or any(
        DIAGNOSTIC.match(ln) and text in ln for ln in lines[-8:]))


def run_probe(k: int, p: Probe, work: Path, watched: list[Path]) -> dict:
    d = work / "probes" / f"{k:04d}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    if p.setup:
        p.setup(d)
    before = snapshot(d, p.outputs)
    # the shared fixtures: sizes and times (a write changes them), digests of small files
    before_w = {w: snapshot(w, digest_limit=1 << 20) for w in watched}
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               **{k: v.replace("{D}", str(d)) for k, v in p.env.items()})
    env.setdefault("DELTACHIP_CACHE", os.environ.get("DELTACHIP_CACHE", str(work / "cache")))
    env["HF_MODULES_CACHE"] = str(work / "hf-modules")      # transformers' copy of remote code
    cmd = [py(), "-m", "deltachip", *_argv(p, d)]
    if p.shell_tail:
        cmd = ["sh", "-c", 'exec "$@" ' + p.shell_tail, "sh", *cmd]
    stdin_file = None
    fifo_writer = None
    if p.stdin is None:
        stdin_arg, data = subprocess.DEVNULL, None
    elif isinstance(p.stdin, bytes):
        stdin_arg, data = subprocess.PIPE, p.stdin
    elif p.stdin == "FIFO":
        fifo = d / ".stdin-fifo"
        os.mkfifo(fifo)
        # a writer that never writes nor closes: the reader sees no end for the timeout
        fifo_writer = os.open(fifo, os.O_RDWR)
        stdin_file = open(fifo, "rb")
        stdin_arg, data = stdin_file, None
    else:
        stdin_file = open(p.stdin, "rb")
        stdin_arg, data = stdin_file, None
    t0 = time.perf_counter()
    timed_out = False
    proc = subprocess.Popen(cmd, stdin=stdin_arg, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=d, preexec_fn=_preexec)
    try:
        out, err = proc.communicate(data, timeout=p.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    except BrokenPipeError:
        out, err = proc.communicate()
    finally:
        if stdin_file:
            stdin_file.close()
        if fifo_writer is not None:
            os.close(fifo_writer)
    secs = time.perf_counter() - t0
    rc = proc.returncode
    err_text = err.decode("utf-8", "backslashreplace")
    after = snapshot(d, p.outputs)
    if p.stdin == "FIFO":
        before.pop(".stdin-fifo", None)
        after.pop(".stdin-fifo", None)
    lines = [ln for ln in err_text.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    fails: list[tuple[int, str]] = []
    if timed_out:
        fails.append((5, f"no end within {p.timeout} s"))
    elif "MemoryError" in err_text or rc in (-9, 137):
        fails.append((1, "MemoryError or killed under the memory cap"))
    if "Traceback" in err_text:
        fails.append((4, "a traceback on stderr"))
    changed = [r for r in before if r in after and before[r] != after[r]]
    gone = [r for r in before if r not in after]
    if changed or gone:
        fails.append((2, f"input changed: {(changed + gone)[:4]}"))
    for w in watched:
        if snapshot(w, digest_limit=1 << 20) != before_w[w]:
            fails.append((2, f"{w} changed"))
    new = [r for r in after if r not in before]
    if new:
        fails.append((6, f"left in the probe folder: {new[:4]}"))
    if not timed_out and rc not in p.ok:
        if rc == 0:
            fails.append((3, "exit 0 on damaged input"))
        elif not any(c in (1, 4) for c, _ in fails):
            fails.append((7, f"exit {rc}, expected {p.ok}"))
    said = [f for f in p.forbid if f in err_text]
    if said:
        fails.append((7, f"stderr says {said[0]!r}"))
    if not timed_out and rc in (1, 2) and rc in p.ok and not fails:
        if not last and p.program:
            pass                        # the program's own exit status
        elif not last:
            fails.append((7, "no message"))
        elif p.names and not named(p.names, lines):
            fails.append((7, f"the message does not name {p.names!r}"))
    return {"k": k, "surface": p.surface, "name": p.name, "rc": rc, "secs": secs,
            "fails": fails, "tail": "\n".join(lines[-4:])[-800:], "note": p.note}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/hostile"))
    ap.add_argument("--merged", type=Path, default=None,
                    help="a checkpoint merged with --firmware calc (chat and --model probes)")
    ap.add_argument("--build-merged", action="store_true",
                    help="build a tiny merged calc model under WORK/fx for those probes")
    ap.add_argument("--jobs", type=int, default=1, help="probes at a time (default 1)")
    ap.add_argument("--only", default=None, help="run the probes of this surface only")
    ap.add_argument("--match", default=None, help="run the probes whose name holds this")
    ap.add_argument("--list", action="store_true", help="list the probes, run none")
    ap.add_argument("--json", type=Path, default=None, help="write every result here")
    args = ap.parse_args()
    work = args.work.resolve()
    if args.merged and args.build_merged:
        ap.error("--merged and --build-merged: one or the other")
    fx = build_fixtures(work / "fx", "build" if args.build_merged else
                        args.merged.resolve() if args.merged else None)
    probes = catalogue(fx)
    chosen = [(k, p) for k, p in enumerate(probes)
              if (args.only is None or p.surface == args.only)
              and (args.match is None or args.match in p.name)]
    if args.list:
        for k, p in chosen:
            print(f"{k:4d} {p.surface:14s} {p.name}")
        print(f"{len(chosen)} probes")
        return 0
    watched = [work / "fx"] + ([args.merged.resolve()] if args.merged else [])
    if fx["merged"] is None:
        print("no merged calc model (--build-merged or --merged DIR): the chat and --model "
              "probes are left out", file=sys.stderr)
    t0 = time.perf_counter()
    results = []

    def one(kp):
        k, p = kp
        r = run_probe(k, p, work, watched)
        shutil.rmtree(work / "probes" / f"{k:04d}", ignore_errors=True)
        mark = "ok " if not r["fails"] else "FAIL"
        print(f"{mark} {k:4d} {r['secs']:6.1f}s rc={r['rc']} [{p.surface}] {p.name}"
              + ("" if not r["fails"] else f"  {r['fails']}"), flush=True)
        return r
    with ThreadPoolExecutor(args.jobs) as ex:
        results = list(ex.map(one, chosen))
    wall = time.perf_counter() - t0
    print()
    print(f"{'surface':16s} {'probes':>7s} {'passed':>7s} {'failed':>7s}")
    surfaces = sorted({r["surface"] for r in results}, key=lambda s: [
        "merge", "chat", "run --model", "run --inputs", "core cache", "front end"].index(s))
    for s in surfaces:
        rs = [r for r in results if r["surface"] == s]
        bad = sum(1 for r in rs if r["fails"])
        print(f"{s:16s} {len(rs):7d} {len(rs) - bad:7d} {bad:7d}")
    bad = [r for r in results if r["fails"]]
    print(f"{'all':16s} {len(results):7d} {len(results) - len(bad):7d} {len(bad):7d}   "
          f"({wall:.0f} s, {args.jobs} at a time)")
    by_class: dict = {}
    for r in bad:
        for c, _ in r["fails"]:
            by_class[c] = by_class.get(c, 0) + 1
    for c in sorted(by_class):
        print(f"  class {c} ({CLASSES[c]}): {by_class[c]}")
    for r in bad:
        print(f"\n#{r['k']} [{r['surface']}] {r['name']}: exit {r['rc']}, {r['secs']:.1f} s")
        for c, why in r["fails"]:
            print(f"  class {c} ({CLASSES[c]}): {why}")
        print("  " + r["tail"].replace("\n", "\n  "))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
