"""Merge under hostile input (issue 43): every JSON file of a merged checkpoint read with a
bound, a base config checked field by field and against its tensors before a model is
built (class 1); nothing written into OUT_DIR during a merge deleted (class 2); safetensors'
own rules on every file merge reads, a chip without its digests refused (class 3); messages
that say what is wrong (class 7). Golden texts."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends.chipdir.checkpoint import ChipDirError
from backends.merge import routed
from backends.engines.merged import check_chip_config, read_manifest
from backends.merge.routed import merge_routed
from backends.chipdir.stfile import MergeError, read_header
from tests.merge.test_errors import _copy, _refused


def _config(base: Path, **changes) -> None:
    cfg = json.loads((base / "config.json").read_text())
    cfg.update(changes)
    (base / "config.json").write_text(json.dumps(cfg))


# ---- class 1: bounded reads, base configs ----------------------------------------------

def test_merged_json_files_are_read_with_a_bound(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "deltachip.json").symlink_to("/dev/zero")
    with pytest.raises(ChipDirError) as e:
        read_manifest(d)
    assert str(e.value) == (f"--model {d}: deltachip.json is a character device, not a regular "
                            f"file: merge it again")
    assert not routed._is_merge(d, ["deltachip.json"])
    (d / "deltachip.json").unlink()
    with open(d / "deltachip.json", "wb") as f:
        f.truncate(8 << 30)                     # sparse: 8 GiB that take no room
    with pytest.raises(ChipDirError) as e:
        read_manifest(d)
    assert str(e.value) == (f"--model {d}: {d}/deltachip.json: larger than 1,048,576 bytes, the "
                            f"limit for a merge manifest (one is a few KB): merge it again")
    assert not routed._is_merge(d, ["deltachip.json"])
    with open(d / "config.json", "wb") as f:
        f.truncate(8 << 30)
    with pytest.raises(ChipDirError) as e:
        check_chip_config(d, {"config": {}})
    assert str(e.value) == (f"{d}/config.json: larger than 4,194,304 bytes, the limit for a "
                            f"merged config.json (the base's config, itself at most 1 MiB, and "
                            f"the chip's): merge it again")


def test_merged_json_files_that_are_not_regular_files(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    os.mkfifo(d / "deltachip.json")             # reading it would block
    with pytest.raises(ChipDirError) as e:
        read_manifest(d)
    assert str(e.value) == (f"--model {d}: deltachip.json is a named pipe (FIFO), not a regular "
                            f"file: merge it again")
    (d / "config.json").mkdir()
    with pytest.raises(ChipDirError) as e:
        check_chip_config(d, {"config": {}})
    assert str(e.value) == (f"{d}/config.json: cannot read: is a directory, not a regular "
                            f"file: merge it again")


@pytest.mark.parametrize("changes, said", [
    ({"hidden_size": "64"}, "field 'hidden_size' must be a positive integer, got \"64\""),
    ({"hidden_size": 64.0}, "field 'hidden_size' must be a positive integer, got 64.0"),
    ({"num_attention_heads": [2]}, "field 'num_attention_heads' must be a positive integer, "
                                   "got [2]"),
    ({"linear_key_head_dim": True}, "field 'linear_key_head_dim' must be a positive integer, "
                                    "got true"),
    ({"rms_norm_eps": "1e-6"}, "field 'rms_norm_eps' must be a positive number, got \"1e-6\""),
    ({"layer_types": ["linear_attention"] * 3}, "layer_types lists 3 layers, but field "
                                                "'num_hidden_layers' is 4"),
    ({"attention_bias": "no"}, "transformers refuses this Qwen3.5 config: TypeError: Field "
                               "'attention_bias' expected bool, got str (value: 'no')"),
    ({"dtype": "int8"}, "field 'dtype' must be one of bfloat16, float16, float32, got \"int8\""),
    ({"text_config": 5}, "transformers cannot build a model of this Qwen3.5 config: "
                         "AttributeError: 'int' object has no attribute 'to_dict'"),
])
def test_base_config_fields_of_the_wrong_type(bases, chips, tmp_path, changes, said):
    base = _copy(bases["tied"], tmp_path / "base")
    _config(base, **changes)
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert str(e) == f"{base / 'config.json'}: {said}"


def test_a_million_layer_config_is_refused_before_a_model_is_built(bases, chips, tmp_path):
    base = _copy(bases["tied"], tmp_path / "base")
    _config(base, num_hidden_layers=1_000_000, layer_types=None)
    t0 = time.perf_counter()
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert time.perf_counter() - t0 < 20
    assert str(e) == (f"{base / 'config.json'}: field 'num_hidden_layers' is 1,000,000, but the "
                      f"weights hold layers 0 to 3 (model.layers.N): the config does not fit "
                      f"the checkpoint")
    _config(base, num_hidden_layers=2, layer_types=None)
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert "field 'num_hidden_layers' is 2, but the weights hold layers 0 to 3" in str(e)


# ---- class 2: OUT_DIR written during the merge ------------------------------------------

def test_a_file_written_into_out_dir_during_the_merge_is_kept(bases, chips, tmp_path,
                                                              monkeypatch):
    out = tmp_path / "out"
    merge_routed(bases["tied"], out, chips["counter"])
    before = sorted(p.name for p in out.iterdir())
    real = routed.write_chip_files

    def meanwhile(tmp, chip):
        (out / "notes.txt").write_text("mine")
        return real(tmp, chip)
    monkeypatch.setattr(routed, "write_chip_files", meanwhile)
    with pytest.raises(MergeError) as e:
        merge_routed(bases["untied"], out, chips["counter"])
    assert str(e.value) == (f"OUT_DIR {out}: 'notes.txt' appeared in it while the new output "
                            f"was being built; nothing was replaced or deleted (the new output "
                            f"was discarded): move what is yours elsewhere and run the command "
                            f"again")
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == sorted(before + ["notes.txt"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_out_dir_dot_is_refused_before_reading_anything(bases, chips, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MergeError) as e:
        merge_routed(tmp_path / "no-base", Path("."), chips["counter"])
    assert str(e.value) == (f"OUT_DIR .: names the current directory or a parent, which cannot "
                            f"be replaced in place; give it by its name (../{tmp_path.name}) or "
                            f"choose another path")


# ---- class 3: safetensors' rules, digests -----------------------------------------------

def _st(path: Path, header: dict, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_safetensors_rules(tmp_path):
    t = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}
    assert read_header(_st(tmp_path / "ok.st", t, b"abcd")).tensors["a"].nbytes == 4
    f = _st(tmp_path / "tail.st", t, b"abcd" + b"\0" * 3)
    with pytest.raises(MergeError) as e:
        read_header(f)
    n = f.stat().st_size
    assert str(e.value) == (f"{f}: corrupt (3 bytes follow the end of its tensor data at byte "
                            f"{n - 3:,}; safetensors refuses such a file)")
    f = _st(tmp_path / "meta.st", {**t, "__metadata__": {"format": "pt", "step": 3}}, b"abcd")
    with pytest.raises(MergeError) as e:
        read_header(f)
    assert str(e.value) == (f"{f}: corrupt (its __metadata__ must map strings to strings; "
                            f"'step' is a number)")
    f = _st(tmp_path / "meta2.st", {**t, "__metadata__": ["pt"]}, b"abcd")
    with pytest.raises(MergeError, match=r"__metadata__ must map strings to strings, it is an "
                                         r"array\)$"):
        read_header(f)
    assert read_header(_st(tmp_path / "null.st", {**t, "__metadata__": None}, b"abcd")).metadata == {}
    f = tmp_path / "len.st"
    f.write_bytes(struct.pack("<Q", 24) + b"{}" + b" " * 14)       # 24 bytes: all of the file
    with pytest.raises(MergeError) as e:
        read_header(f)
    assert str(e.value) == (f"{f}: corrupt or truncated (its header length field says 24 bytes, "
                            f"but only 16 follow it)")
    f = tmp_path / "utf16.st"
    raw = '{"a": 1}'.encode("utf-16")
    f.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(MergeError, match="its header is not JSON"):
        read_header(f)


def test_a_base_shard_with_trailing_bytes_is_refused(bases, chips, tmp_path):
    base = _copy(bases["sharded"], tmp_path / "tail")
    with open(base / "model-00004-of-00011.safetensors", "ab") as f:
        f.write(b"\0" * 8)
    _refused(base, chips["counter"], tmp_path / "out",
             r"model-00004-of-00011\.safetensors: corrupt \(8 bytes follow the end of its "
             r"tensor data")


def test_the_fast_engine_applies_the_same_rules(tmp_path):
    from backends.chipdir.weights import Tensors
    d = tmp_path / "chip"
    d.mkdir()
    f = _st(d / "model.safetensors", {"w": {"dtype": "F32", "shape": [1],
                                           "data_offsets": [0, 4]}}, b"\0" * 4 + b"junk")
    with pytest.raises(ChipDirError, match=r"corrupt \(4 bytes follow the end of its tensor "
                                           r"data"):
        Tensors(d)
    f.unlink()
    f.mkdir()
    with pytest.raises(ChipDirError) as e:
        Tensors(d)
    assert str(e.value) == f"{d}: no model.safetensors and no model.safetensors.index.json"


def test_a_chip_without_its_digests_is_refused_unless_asked(bases, chips, tmp_path):
    chip = _copy(chips["counter"], tmp_path / "chip")
    (chip / "manifest.json").unlink()
    e = _refused(bases["tied"], chip, tmp_path / "out")
    assert str(e) == (f"chip {chip}: no manifest.json (the size and sha256 digest of each of its "
                      f"files, written by `deltachip compile`), so a damaged weight or an edited "
                      f"chip.json would go unnoticed: recompile it with `deltachip compile`, or "
                      f"merge it unchecked with --no-digests")
    r = merge_routed(bases["tied"], tmp_path / "out", chip, digests=False)
    assert (r.out / "deltachip.json").is_file()


def test_a_chip_whose_manifest_is_a_directory(bases, chips, tmp_path):
    chip = _copy(chips["counter"], tmp_path / "chip")
    (chip / "manifest.json").unlink()
    (chip / "manifest.json").mkdir()
    with pytest.raises(ChipDirError, match=r"manifest\.json is a directory, not a regular file"):
        merge_routed(bases["tied"], tmp_path / "out", chip)


def test_merge_cli_no_digests(bases, chips, tmp_path):
    chip = _copy(chips["counter"], tmp_path / "chip")
    (chip / "manifest.json").unlink()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "deltachip", "merge", *map(str, args)],
                              capture_output=True, text=True, env=env)
    r = cli(bases["tied"], tmp_path / "out", "--chip", chip)
    assert r.returncode == 2 and r.stderr.endswith("merge it unchecked with --no-digests\n")
    r = cli(bases["tied"], tmp_path / "out", "--chip", chip, "--no-digests")
    assert r.returncode == 0, r.stderr
    r = cli("--help")
    assert "--no-digests" in r.stdout


# ---- class 7: a file that is not a regular file is not called missing ---------------------

def test_non_regular_files_are_named_by_what_they_are(bases, chips, tmp_path):
    base = _copy(bases["tied"], tmp_path / "cfgdir")
    (base / "config.json").unlink()
    (base / "config.json").mkdir()
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert str(e) == f"{base / 'config.json'}: is a directory, not a regular file"
    base = _copy(bases["sharded"], tmp_path / "fifo")
    shard = base / "model-00002-of-00011.safetensors"
    shard.unlink()
    os.mkfifo(shard)
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert str(e) == (f"base {base}: shard model-00002-of-00011.safetensors is a named pipe "
                      f"(FIFO), not a regular file (model.safetensors.index.json names it)")
    base = _copy(bases["tied"], tmp_path / "stdir")
    (base / "model.safetensors").unlink()
    (base / "model.safetensors").mkdir()
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert str(e) == f"{base / 'model.safetensors'}: is a directory, not a regular file"
    chip = _copy(chips["counter"], tmp_path / "chip")
    (chip / "chip.json").unlink()
    (chip / "chip.json").mkdir()
    with pytest.raises(ChipDirError) as e:
        merge_routed(bases["tied"], tmp_path / "out", chip)
    assert str(e.value) == (f"{chip / 'chip.json'}: is a directory, not a regular file: "
                            f"recompile it with `deltachip compile`")


# ---- the hostile pass (scripts/hostile_pass.py): files merge copies, JSON numbers ----------

@pytest.mark.parametrize("name, content, said", [
    ("tokenizer_config.json", b"[" * 200_000 + b"]" * 200_000,
     "not valid JSON: nested too deeply"),
    ("generation_config.json", b'{"x": ' + b"9" * 5000 + b"}",
     "not valid JSON: a number of 5,000 digits (at most 4,300)"),
    ("generation_config.json", b"[]", "not a JSON object"),
    ("chat_template.jinja", b"{{ x }}\xff\xfe", "not UTF-8 text (byte 7)"),
    ("chat_template.jinja", b"{% for m in messages %}{{ m }}",
     "not a valid Jinja chat template (line 1: Unexpected end of template. Jinja was looking "
     "for the following tags: 'endfor' or 'else'. The innermost block that needs to be closed "
     "is 'for'.)"),
])
def test_files_merge_copies_are_checked_as_their_readers_take_them(bases, chips, tmp_path,
                                                                    name, content, said):
    """A tokenizer or generation file the merge copies as it is must be what transformers
    will read (a JSON object, UTF-8 text): else the merge succeeded into a model that does
    not load (class 3)."""
    base = _copy(bases["tied"], tmp_path / "base")
    (base / name).write_bytes(content)
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert str(e) == f"{base / name}: {said}"


@pytest.mark.parametrize("make, said", [
    (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
    (lambda p: os.mkfifo(p), "is a named pipe (FIFO), not a regular file"),
    (lambda p: p.mkdir(), "is a directory, not a regular file"),
    (lambda p: p.symlink_to(p.name), "a symbolic link that leads to no file (missing, or a "
                                     "loop)"),
])
def test_a_tokenizer_file_that_is_not_a_file_is_not_skipped(bases, chips, tmp_path, make,
                                                            said):
    """It used to be skipped as if missing: the merged model had no tokenizer (class 3)."""
    base = _copy(bases["tied"], tmp_path / "base")
    (base / "tokenizer.json").unlink()
    make(base / "tokenizer.json")
    e = _refused(base, chips["counter"], tmp_path / "out")
    assert str(e) == f"{base / 'tokenizer.json'}: {said}"


def test_a_json_number_too_long_is_refused_by_name(tmp_path):
    """json.loads raised int()'s ValueError (advising sys.set_int_max_str_digits), which no
    reader caught: a traceback (class 4)."""
    raw = b'{"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "n": 1' + b"0" * 5000
    raw += b"}"
    f = tmp_path / "big.st"
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + b"abcd")
    with pytest.raises(MergeError) as e:
        read_header(f)
    assert str(e.value) == (f"{f}: corrupt (its header is not JSON: a number of 5,001 digits "
                            f"(at most 4,300))")
    d = tmp_path / "m"
    d.mkdir()
    (d / "deltachip.json").write_text('{"format": ' + "7" * 5000 + "}")
    with pytest.raises(ChipDirError) as e:
        read_manifest(d)
    assert str(e.value) == (f"--model {d}: not a checkpoint written by `deltachip merge` (no "
                            f"readable deltachip.json)")


def _rerecorded(src: Path, dst: Path, rel: str, edit) -> Path:
    """A copy of merged checkpoint ``src`` whose file ``rel`` is edited by ``edit(path)`` and
    re-recorded in its deltachip.json (size and sha256): damage the digests cannot see."""
    import hashlib
    d = _copy(src, dst)
    edit(d / rel)
    m = json.loads((d / "deltachip.json").read_text())
    data = (d / rel).read_bytes()
    m["files"][rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (d / "deltachip.json").write_text(json.dumps(m))
    return d


def _set(**changes):
    def edit(p: Path):
        cfg = json.loads(p.read_text())
        cfg.update(changes)
        p.write_text(json.dumps(cfg))
    return edit


@pytest.mark.parametrize("changes, said", [
    ({"chip_token_offset": "x"}, "chip_token_offset is \"x\", but the merge wrote 320 "
                                 "(deltachip.json: tokens)"),
    ({"chip_token_offset": -5}, "chip_token_offset is -5, but the merge wrote 320 "
                                "(deltachip.json: tokens)"),
    ({"vocab_size": 5}, "vocab_size is 5, but the merge wrote 577 (deltachip.json: tokens)"),
    ({"base_config": 5}, "base_config is not the base's config the merge recorded "
                         "(deltachip.json: base.config_sha256)"),
    ({"auto_map": None}, "auto_map is null, but a routed merge's names modeling_deltachip.py's "
                         "classes"),
    ({"model_type": "deltachip_routed"}, "model_type is \"deltachip_routed\", but a routed "
                                         "merge's is 'qwen3_5_text'"),
    ({"hidden_act": "silu"}, "hidden_act is \"silu\", but a routed merge's stops a plain model "
                             "from loading it"),
    ({"chip_rom_layers": ["a"]}, "chip_rom_layers is [\"a\"], but it lists layer numbers"),
    ({"chip_programs": 3}, "chip_programs is 3, but the merge wrote 1 program "
                           "(deltachip.json: the firmware and its programs)"),
    ({"chip_bridge": {"x": 1}}, "chip_bridge is {\"x\": 1}, but the merge wrote none "
                                "(deltachip.json: bridge.tool_calls)"),
])
def test_a_merged_config_edited_past_its_digest_is_named(merged, tmp_path, capfd, changes,
                                                         said):
    """The hostile pass's re-recorded configs: what the modeling file reads first is checked
    against the manifest before transformers loads the model (chat, run --model), not met
    as a traceback inside it or run with a vocabulary of 5 (classes 3 and 4)."""
    from deltachip.cli import main
    d = _rerecorded(merged("tied", "counter"), tmp_path / "m", "config.json", _set(**changes))
    assert main(["chat", str(d), "--prompt", "x"]) == 2
    assert capfd.readouterr().err == f"{d / 'config.json'}: {said}: merge it again\n"
    from backends.engines.merged import MergedEngine
    with pytest.raises(ChipDirError) as e:
        MergedEngine(d)
    assert str(e.value) == f"{d / 'config.json'}: {said}: merge it again"


@pytest.mark.parametrize("raised, said", [
    ("ImportError('no module named cop')", "ImportError: no module named cop"),
    ("SystemExit(0)", "SystemExit: 0"),             # it used to end chat with exit 0
])
def test_a_modeling_file_that_fails_to_load_is_named(merged, tmp_path, raised, said):
    """Any error raised while transformers loads the model (its own code, run from the
    model's folder) is named with the folder, not a traceback (class 4)."""
    from backends.engines.merged import MergedEngine

    def broken(p: Path):
        p.write_text(p.read_text() + f"\nraise {raised}\n")
    d = _rerecorded(merged("tied", "counter"), tmp_path / "m", "modeling_deltachip.py", broken)
    with pytest.raises(ChipDirError) as e:
        MergedEngine(d)
    assert str(e.value) == (f"{d / 'modeling_deltachip.py'}: transformers cannot load the "
                            f"merged checkpoint ({said}): merge it again")


@pytest.mark.parametrize("rel, edit, said", [
    ("tokenizer_config.json", _set(eos_token=5), "TypeError: Special token eos_token has to be "
     "either str or AddedToken but got: <class 'int'>"),
    ("tokenizer_config.json", _set(added_tokens_decoder=[]),
     "AttributeError: 'list' object has no attribute 'items'"),
    ("modeling_deltachip.py", lambda p: p.write_text("def (:\n"),
     "SyntaxError: invalid syntax (<unknown>, line 1)"),
])
def test_a_load_error_names_the_file_transformers_failed_on(merged, tmp_path, rel, edit,
                                                            said):
    """A merged file damaged past its digest (re-recorded) that transformers refuses while
    loading the tokenizer or the model: the error names that file (class 7), as chat
    says it."""
    import warnings

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from backends.engines.merged import load_error
    d = _rerecorded(merged("tied", "counter"), tmp_path / "m", rel, edit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if rel.startswith("tokenizer"):
                AutoTokenizer.from_pretrained(str(d), trust_remote_code=False)
            else:
                AutoModelForCausalLM.from_pretrained(str(d), trust_remote_code=True)
        except Exception as e:
            err = load_error(d, e)
        else:
            raise AssertionError("transformers loaded it")
    assert str(err) == (f"{d / rel}: transformers cannot load the merged checkpoint ({said}): "
                        f"merge it again")


def test_a_merged_model_s_files_are_checked_before_run_model(merged, tmp_path):
    """`run --model` (the hf engine) checks every file against the manifest's record, as
    chat does: a modeling file edited in place is named before transformers runs it."""
    from backends.engines.merged import MergedEngine
    d = _copy(merged("tied", "counter"), tmp_path / "m")
    f = d / "modeling_deltachip.py"
    f.write_text(f.read_text().replace("import copy", "import cop(", 1))
    with pytest.raises(ChipDirError) as e:
        MergedEngine(d)
    assert str(e.value) == (f"{d}: modeling_deltachip.py is not the file the merge wrote (its "
                            f"sha256 differs): merge it again")


@pytest.mark.parametrize("changes, said", [
    ({"dtype": "fp64"}, "deltachip.json: dtype \"fp64\"; expected one of bf16, fp32: merge it "
                        "again"),
    ({"dtype": 5}, "deltachip.json: dtype 5; expected one of bf16, fp32: merge it again"),
    ({"format_version": 99}, "deltachip.json: format version 99; this deltachip reads version "
                             "1 (merge it again with this deltachip)"),
    ({"format_version": "1"}, "deltachip.json: format version \"1\"; this deltachip reads "
                              "version 1 (merge it again with this deltachip)"),
    ({"chip": None}, "deltachip.json: its chip section is not an object: merge it again"),
    ({"bridge": "x"}, "deltachip.json: its bridge section is not an object: merge it again"),
])
def test_a_manifest_with_a_bad_dtype(merged, tmp_path, changes, said):
    d = _copy(merged("tied", "counter"), tmp_path / "m")
    _set(**changes)(d / "deltachip.json")
    with pytest.raises(ChipDirError) as e:
        read_manifest(d, "")
    assert str(e.value) == f"{d}: {said}"


def test_chat_on_a_manifest_whose_bridge_is_not_an_object(merged, tmp_path, capfd):
    from deltachip.cli import main
    d = _copy(merged("tied", "counter"), tmp_path / "m")
    _set(bridge="x")(d / "deltachip.json")
    assert main(["chat", str(d), "--prompt", "x"]) == 2
    assert capfd.readouterr().err == (f"{d}: deltachip.json: its bridge section is not an "
                                      f"object: merge it again\n")


def test_a_grown_chip_shard_under_a_memory_cap(bases, chips, tmp_path):
    """safetensors maps a whole file to list its tensors: a chip shard grown to 8 GiB (sparse)
    under a 4 GiB address-space cap was a MemoryError traceback (classes 1 and 4)."""
    import resource
    chip = _copy(chips["counter"], tmp_path / "chip")
    with open(chip / "model.safetensors", "r+b") as f:
        f.truncate(8 << 30)

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    r = subprocess.run([sys.executable, "-m", "deltachip", "merge", str(bases["tied"]),
                        str(tmp_path / "out"), "--chip", str(chip)], capture_output=True,
                       text=True, preexec_fn=cap, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1] == (f"{chip / 'model.safetensors'}: corrupt or grown (its "
                                         f"8,589,934,592 bytes cannot be mapped into memory): "
                                         f"recompile it with `deltachip compile`")


def test_a_merged_shard_with_a_damaged_header_is_named(merged, tmp_path, capfd):
    """Weight shards are recorded by size only; a byte flipped in one's header reached
    transformers (chat: a traceback). Their headers are read by safetensors' rules first."""
    from deltachip.cli import main
    from backends.engines.merged import MergedEngine
    d = _copy(merged("tied", "counter"), tmp_path / "m")
    shard = sorted(d.glob("model-*.safetensors"))[-1]
    data = bytearray(shard.read_bytes())
    data[9] ^= 0x5A                                 # the header's first key's quote
    shard.write_bytes(bytes(data))
    said = (f"{shard}: corrupt (its header is not JSON: Expecting property name enclosed in "
            f"double quotes: line 1 column 2 (char 1)): merge it again")
    with pytest.raises(ChipDirError) as e:
        MergedEngine(d)
    assert str(e.value) == said
    assert main(["chat", str(d), "--prompt", "x"]) == 2
    assert capfd.readouterr().err == said + "\n"


@pytest.mark.parametrize("fields, budget, said", [
    ({"eos_token_id": "x"}, True, "eos_token_id must be a token id (an integer below 10) or a "
                                  "list of them, got \"x\": merge it again"),
    ({"pad_token_id": [3, 99]}, True, "pad_token_id must be a token id (an integer below 10) "
                                      "or a list of them, got [3, 99]: merge it again"),
    ({"chip_call_budget": "x"}, True, "chip_call_budget must be a positive integer (the most "
                                      "chip tokens a tool call runs), got \"x\": fix it, or "
                                      "give --call-budget N"),
    ({"chip_call_budget": -1}, True, "chip_call_budget must be a positive integer (the most "
                                     "chip tokens a tool call runs), got -1: fix it, or give "
                                     "--call-budget N"),
    ({"chip_call_budget": -1}, False, None),        # --call-budget given: it is not read
    ({"eos_token_id": [2, 3], "chip_call_budget": 5}, True, None),
])
def test_chat_checks_the_generation_config(tmp_path, fields, budget, said):
    """A generation_config.json field of the wrong kind ran silently with the default budget
    (class 3) or failed inside generate() (a traceback, class 4)."""
    from types import SimpleNamespace
    from deltachip.chat import _check_generation_config
    model = SimpleNamespace(generation_config=SimpleNamespace(**fields),
                            config=SimpleNamespace(vocab_size=10))
    if said is None:
        _check_generation_config(tmp_path, model, budget)
        return
    with pytest.raises(ChipDirError) as e:
        _check_generation_config(tmp_path, model, budget)
    assert str(e.value) == f"{tmp_path / 'generation_config.json'}: {said}"


@pytest.mark.parametrize("files, said", [
    ([], "deltachip.json: its file record (files) is not an object of file names: merge it "
         "again"),
    ({"../../etc/passwd": {"bytes": 1}}, "deltachip.json: its file record names "
                                         "'../../etc/passwd', outside the model's folder: merge "
                                         "it again"),
])
def test_a_manifest_whose_file_record_is_damaged(merged, tmp_path, files, said):
    """A record that is not an object was taken as no record (an older merge): nothing was
    checked and chat went on (class 3)."""
    from backends.engines.merged import check_files
    d = _copy(merged("tied", "counter"), tmp_path / "m")
    _set(files=files)(d / "deltachip.json")
    with pytest.raises(ChipDirError) as e:
        check_files(d, read_manifest(d, ""))
    assert str(e.value) == f"{d}: {said}"


@pytest.mark.parametrize("layout, reads", [("routed", " (it reads the base's vocabulary)"),
                                           ("stock", "")])
def test_merge_firmware_fp32_whose_tables_cannot_fit_names_the_dtype(bases, tmp_path, capfd,
                                                                     monkeypatch, layout,
                                                                     reads):
    """The core's compile refusing fp32 token tables is said of --dtype fp32, not as a
    token of cpu/rv32/core.hdl to narrow (the compile itself is stood in for: in fp32 it
    takes minutes before the tables are sized); bf16's own refusal passes as it is."""
    import cpu.rv32.merged as merged_mod
    from backends.compile.rules import VocabularyError
    from deltachip.cli import main
    from hdl.diagnostics import Diagnostic, Loc

    def refuse(fw, target, dtype, **kw):
        raise VocabularyError([Diagnostic(Loc("cpu/rv32/core.hdl", 105, 5), (
            f"the token tables would take 12.2 GiB (embedding and lm_head: 880,916 ids x "
            f"hidden 1856 in {dtype}), more than 8 GiB; token kind 'Half' has the widest "
            f"payload (18 bits): narrow it, or carry a wide value in two tokens"))])
    monkeypatch.setattr(merged_mod, "core_for", refuse)
    argv = ["merge", str(bases["tied"]), str(tmp_path / "out"), "--firmware", "calc",
            "--target", "compact", "--layout", layout]
    assert main(argv + ["--dtype", "fp32"]) == 2
    err = capfd.readouterr().err.strip().splitlines()[-1]
    assert err == ("--dtype fp32 is not available for --firmware on this base (compact): the "
                   "core's token tables would take 12.2 GiB (embedding and lm_head: 880,916 "
                   f"ids x hidden 1856 in fp32), more than 8 GiB{reads}; merge in bf16 (the "
                   "default)")
    assert main(argv) == 2
    assert "narrow it" in capfd.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_fast_engine_s_file_check(merged, tmp_path):
    """`run --model --engine fast` checks every recorded file of the merged model by kind
    and size, and the digests of the files it reads (FAST_READS): a file it never opens
    (the merged program's ROM images, the tokenizer) deleted or truncated is named; one
    changed in place is not its concern; one it reads changed in place is named."""
    from backends.engines.merged import FAST_READS, check_files, read_manifest
    src = merged("tied", "counter")

    def damaged(name, rel, edit):
        d = _copy(src, tmp_path / name)
        edit(d / rel)
        return d
    d = damaged("gone", "tokenizer.json", Path.unlink)
    with pytest.raises(ChipDirError) as e:
        check_files(d, read_manifest(d), FAST_READS)
    assert str(e.value) == f"{d}: tokenizer.json: no such file or directory: merge it again"

    def flip(p: Path):
        b = bytearray(p.read_bytes())
        b[len(b) // 2] ^= 1
        p.unlink()
        p.write_bytes(bytes(b))
    d = damaged("flipped-tok", "tokenizer.json", flip)
    check_files(d, read_manifest(d), FAST_READS)
    with pytest.raises(ChipDirError, match="tokenizer.json is not the file the merge wrote"):
        check_files(d, read_manifest(d))
    d = damaged("flipped-chip", "deltachip/chip.json", flip)
    with pytest.raises(ChipDirError) as e:
        check_files(d, read_manifest(d), FAST_READS)
    assert str(e.value) == (f"{d}: deltachip/chip.json is not the file the merge wrote (its "
                            f"sha256 differs): merge it again")


@pytest.mark.parametrize("engine", ["fast", "hf"])
def test_run_model_on_a_merge_of_another_chip(merged, tmp_path, capfd, engine):
    """`run --model` on a model merged with --chip (not the core): named, never a
    traceback from the core's token protocol (class 4)."""
    from deltachip.cli import main
    from firmware import toolchain
    elf = toolchain.build(toolchain.shipped_programs()["calc"], tmp_path / "calc.elf")
    d = merged("tied", "counter")
    assert main(["run", str(elf), "--engine", engine, "--model", str(d), "--input", "1"]) == 2
    assert capfd.readouterr().err.strip().splitlines()[-1] == (
        f"{d}: its chip is Counter, not the RISC-V core (cpu/rv32): --model takes a model "
        f"merged with `deltachip merge BASE_DIR OUT_DIR --firmware PROG`")
