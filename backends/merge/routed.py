"""The routed merge: a Qwen3.5 text base and a compiled chip, side by side in one checkpoint.

Takes: a base directory (:mod:`backends.merge.base`), a directory written by ``deltachip
compile``, an output path. Gives: OUT_DIR with

- ``config.json``: ``auto_map`` to the shipped ``modeling_deltachip.py`` (load with
  ``trust_remote_code=True``; model_type ``qwen3_5_text`` and a ``hidden_act`` no plain
  model can build: :data:`~backends.chipdir.merged.STOCK_GUARD`), the base's config as
  ``base_config``, the chip's as ``chip_config``, ``chip_token_offset`` (the base's
  vocab_size: chip token ``i`` is id ``offset + i``) and ``chip_vocab_size``;
- the weights: every base shard copied byte for byte (renamed ``model-0000i-of-0000N``; a
  single-file base becomes shard 1), then one shard per chip weight file with the chip's
  tensors, byte for byte, under ``chip.`` (``chip.model.layers.0...``; unless ``tables`` is
  ``plain``, the embedding and lm_head in structured form when they have it,
  :mod:`backends.merge.tables`, and the layers' 2-D weights as their nonzeros when that is
  smaller, :mod:`backends.merge.sparse`)
  and the initial GDN state of each layer holding a memory image (``chip.rom_state_L``, fp32
  bits as int32), and ``model.safetensors.index.json``;
- the base's tokenizer files, tokenizer.json with one vocabulary entry per chip id
  (``<|chip:KIND:PAYLOAD|>``, ``<|chip:KIND|>`` for a kind without payload) at its id;
  text tokenizes as before; the others and ``generation_config.json`` copied;
- ``deltachip.json`` (the manifest: format, layout, the chip's name and hashes, the base,
  the token range), ``deltachip/chip.json`` (the chip's own, byte for byte) and
  ``deltachip/roms/NAME.hex`` (each memory image, one hex word a line).

Everything is checked before a byte is written; the output is built in a temporary
directory beside OUT_DIR, one tensor's chunk in memory at a time, and renamed into place at
the end: a bad base, a full disk or an interrupt leaves nothing half-written, and BASE_DIR
and the chip directory are only read.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from backends.chipdir.checkpoint import shard_name
from backends.chipdir.chipschema import kind_ids
from backends.chipdir.merged import (AUTO_MAP, FORMAT, FORMAT_VERSION, MANIFEST,  # noqa: F401
                                     MODEL_TYPE, MODELING, PLAIN_TABLES, STOCK_GUARD,
                                     read_merged_json)
from backends.chipdir.checkpoint import INDEX, SINGLE
from backends.merge.base import Base, read_base, read_json, read_text_file
from backends.chipdir.stfile import (MergeError, OutTensor, copy_file, file_size, read_header,
                                     write_file)
from common.outputs import (building_dir, dir_name_problem, disk_shortfall, os_reason,
                            prepare_dir_output)


class Firmware(Protocol):
    """What a merge needs of a program for the core (:class:`cpu.rv32.merged.Firmware`):
    its memory images and its manifest entry."""
    images: dict[str, list[int]]

    def manifest(self) -> dict[str, Any]: ...


#: what may be in a directory this command wrote (besides shards), so it may be replaced
OURS = {"config.json", INDEX, MANIFEST, MODELING, "deltachip", "generation_config.json",
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
        "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json"}
DTYPE_NAMES = {"bf16": "bfloat16", "fp32": "float32"}
#: how the chip's token tables may be stored (merge_routed's ``tables``)
TABLES = ("auto", "structured", "plain")


@dataclass
class MergeReport:
    out: Path
    base_bytes: int
    out_bytes: int
    chip_bytes: int
    seconds: float
    shards: list[str] = field(default_factory=list)
    chip_tokens: int = 0
    token_offset: int = 0


def chip_token_names(chip: dict[str, Any]) -> list[str]:
    """The name of every chip id: ``<|chip:KIND:PAYLOAD|>`` (``<|chip:KIND|>`` for a kind
    without payload; an id no kind covers: ``<|chip:#ID|>``)."""
    vocab = chip["tokens"]["vocab"]
    names: list[str | None] = [None] * vocab
    for k in chip["tokens"]["kinds"]:
        bits, off = k["payload_bits"], k["offset"]
        if bits == 0:
            names[off] = f"<|chip:{k['name']}|>"
        else:
            for p in range(kind_ids(k)):
                names[off + p] = f"<|chip:{k['name']}:{p}|>"
    return [n if n is not None else f"<|chip:#{i}|>" for i, n in enumerate(names)]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _inside(a: Path, b: Path) -> bool:
    """Whether path ``a`` is ``b`` or lies below it (both resolved)."""
    a, b = a.resolve(), b.resolve()
    return a == b or b in a.parents


def prepare_merge_output(out: Path, base: Path, chip: Path) -> Path:
    """``out`` once it is safe to build there: not the base or the chip directory, neither
    inside the other, and absent, empty or a previous merge output."""
    for what, d in (("base", base), ("chip", chip)):
        if _inside(out, d) or _inside(d, out):
            how = "is" if _inside(out, d) and _inside(d, out) else "overlaps"
            raise MergeError(f"OUT_DIR {out}: {how} the {what} directory {d}; merge never "
                             "writes there: choose another path")
    return prepare_dir_output(out, _out_error, "merge", _is_merge,
                              lambda e: e in OURS or e.endswith(".safetensors"))


def check_out_name(out: Path) -> None:
    """MergeError when OUT_DIR names the current directory or a parent (``.``, ``..``),
    which the merge cannot rename its output onto: asked first, before any work."""
    why = dir_name_problem(out)
    if why is not None:
        raise _out_error(out, why)


def _out_error(path: Path, why: str) -> MergeError:
    return MergeError(f"OUT_DIR {path}: {why}")


def _is_merge(d: Path, entries: list[str]) -> bool:
    if MANIFEST not in entries or not all(e in OURS or e.endswith(".safetensors")
                                          for e in entries):
        return False
    from common.inputs import InputTooLarge
    try:
        m = read_merged_json(d / MANIFEST)
    except (OSError, ValueError, InputTooLarge):
        return False
    return isinstance(m, dict) and m.get("format") == FORMAT


@dataclass
class MergeChip:
    """What the merge takes from a compiled chip directory."""
    path: Path
    chip: dict[str, Any]
    config: dict[str, Any]
    files: list            # Headers of its weight files
    rom_states: dict[int, bytes]
    rom_shape: tuple[int, int, int]
    chip_json: bytes
    roms: dict[str, list[int]]      # the memory images merged (the chip's, or a firmware's)
    #: the other programs of a merge with several (``--firmware`` given more than once):
    #: each one's memory images (over the chip's) and its initial GDN states, as above
    programs: list[tuple[dict[str, list[int]], dict[int, bytes]]] = field(
        default_factory=list)


def _read_chip(path: Path, dtype: str | None,
               roms: dict[str, list[int]] | None = None, digests: bool = True,
               others: list[dict[str, list[int]]] | None = None) -> MergeChip:
    """The chip at ``path``, checked as every engine checks it (ChipDirError otherwise);
    ``roms`` (memory name -> words) replace its own memory images. A chip without its
    manifest.json (the digests of its files) is refused unless ``digests`` is False: a
    flipped weight byte or an edited chip.json could not be found. ``others``: the images
    of further programs (:attr:`MergeChip.programs`)."""
    import os
    import torch
    from backends.chipdir.checkpoint import weights_file
    from backends.engines.base import ChipEngine
    from backends.chipdir.manifest import MANIFEST as DIGESTS
    if digests and path.is_dir() and not os.path.lexists(path / DIGESTS):
        raise MergeError(f"chip {path}: no {DIGESTS} (the size and sha256 digest of each of "
                         f"its files, written by `deltachip compile`), so a damaged weight or "
                         f"an edited chip.json would go unnoticed: recompile it with "
                         f"`deltachip compile`, or merge it unchecked with --no-digests")
    eng = ChipEngine(path, roms=roms)
    compiled = eng.chip["dtype"]
    if dtype is not None and dtype != compiled:
        raise MergeError(f"chip {path} was compiled for {compiled}, not {dtype}: its exactness "
                         f"holds in {compiled} only; recompile it with `deltachip compile "
                         f"--dtype {dtype}` or merge with --dtype {compiled}")
    wf = weights_file(path)
    if wf.name == SINGLE:
        files = [read_header(wf)]
    else:
        index = read_json(wf, "a weight index")
        files = [read_header(path / n) for n in dict.fromkeys(index["weight_map"].values())]
    cfg = dict(eng.chip["config"])
    nv, dk, dv = (cfg["linear_num_value_heads"], cfg["linear_key_head_dim"],
                  cfg["linear_value_head_dim"])

    def layer_states(roms: dict[str, list[int]]) -> dict[int, bytes]:
        states: dict[int, bytes] = {}
        for layer, heads in sorted(eng.rom_states(roms).items()):
            full = torch.zeros(nv, dk, dv, dtype=torch.float32)
            for vh, st in heads.items():
                full[vh] = st
            states[layer] = full.view(torch.int32).numpy().tobytes()
        return states
    states = layer_states(eng.roms)
    programs = []
    for images in others or []:
        eng.refuse_table_images(images)
        mine = {**eng.roms, **images}
        theirs = layer_states(mine)
        if set(theirs) != set(states):
            raise MergeError(f"chip {path}: the programs' memory images are in different "
                             "layers; merge one program")
        programs.append((mine, theirs))
    return MergeChip(path, eng.chip, cfg, files, states, (nv, dk, dv),
                 _chip_json_bytes(path), eng.roms, programs)


def _chip_json_bytes(path: Path) -> bytes:
    """The bytes of the chip's chip.json (read with its bound, as the engine read it)."""
    from backends.chipdir.checkpoint import JSON_LIMITS, ChipDirError
    from common.inputs import InputTooLarge, read_bounded
    try:
        return read_bounded(path / "chip.json", *JSON_LIMITS["chip.json"])
    except InputTooLarge as e:
        raise ChipDirError(str(e)) from None
    except OSError as e:
        raise MergeError(f"{path / 'chip.json'}: cannot read: {os_reason(e)}") from None


def _chip_name(name: str) -> str:
    return "chip." + name


def _patch_tokenizer(tok: dict[str, Any], names: list[str], offset: int, where: Path
                     ) -> dict[str, Any]:
    """tokenizer.json with ``names[i]`` the token of id ``offset + i`` in the model's
    vocabulary: the id keeps its name (``convert_tokens_to_ids``, ``decode``), and text does
    not produce it (no BPE merge makes it, and Qwen's pre-tokenizer splits ``<|``, the
    words and ``|>`` apart), so a chip id comes from the model or from code, never from a
    user's text. Not added tokens: 659,472 of them (the core's) made tokenizer.json 116 MB
    and its loading take 47 s; in the vocabulary, 21 MB and 1.2 s."""
    model = tok.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(vocab, dict):
        kind = model.get("type") if isinstance(model, dict) else None
        raise MergeError(f"{where}: a {kind or 'tokenizer'} model without a vocabulary map; "
                         "merge adds chip tokens to BPE, WordLevel and WordPiece tokenizers")
    added = tok.get("added_tokens") or []
    taken = set(vocab) | {a.get("content") for a in added if isinstance(a, dict)}
    clash = next((n for n in names if n in taken), None)
    if clash is not None:
        raise MergeError(f"{where}: already has a token {clash}: merge one chip per base")
    top = max([*vocab.values(), *(a.get("id", -1) for a in added if isinstance(a, dict))],
              default=-1)
    if top >= offset:
        raise MergeError(f"{where}: has token id {top}, not below the model's vocab_size "
                         f"{offset}, where the chip's ids begin")
    # an added token the vocabulary lacks is numbered by the tokenizers library after the
    # vocabulary's last entry when it loads (its id in the file is not read back): Qwen's
    # special tokens (248,044..248,076, past the 248,044 BPE entries) would move behind the
    # chip's ids. In the vocabulary at their own ids, they keep them.
    for a in added:
        if isinstance(a, dict) and isinstance(a.get("content"), str) \
                and isinstance(a.get("id"), int):
            vocab.setdefault(a["content"], a["id"])
    vocab.update((n, offset + i) for i, n in enumerate(names))
    return tok


def _rom_hex(words: list[int], width: int) -> str:
    digits = max(1, -(-width // 4))
    return "".join(f"{w:0{digits}x}\n" for w in words)


def merge_routed(base_dir: str | Path, out_dir: str | Path, chip_dir: str | Path,
                 dtype: str | None = None,
                 progress: Callable[[str], None] | None = None,
                 tables: str = "auto",
                 firmware: Firmware | list[Firmware] | None = None,
                 digests: bool = True) -> MergeReport:
    """Write the routed merge of ``chip_dir`` into ``base_dir``'s model at ``out_dir`` (see
    the module docstring). ``dtype`` (bf16 or fp32, default the chip's) must be the chip's.
    ``tables``: how the chip's embedding and lm_head are stored: ``structured``
    (:mod:`backends.merge.tables`; refused when the chip's tables lack the structure),
    ``plain`` (byte for byte, the layers' weights too), or ``auto`` (structured when the
    chip's tables have the structure and it is smaller); but ``plain``, a layer weight is
    stored as its nonzeros when that is smaller (:mod:`backends.merge.sparse`). ``firmware``: a RISC-V program whose memory images replace
    the chip's (the chip is then the core: :func:`cpu.rv32.merged.core_for`), or a list of
    them (the first one's images are the chip's; each program answers its own tool:
    :func:`program_files`). ``digests`` False merges a chip without its manifest.json
    (unchecked)."""
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    base_dir, out, chip_dir = Path(base_dir), Path(out_dir), Path(chip_dir)
    if tables not in TABLES:
        raise ValueError(f"tables must be one of {', '.join(TABLES)}, got {tables!r}")
    fws = programs_of(firmware)
    firmware = fws[0] if fws else None
    inp = read_inputs(base_dir, out, chip_dir, dtype, fws, say, digests=digests)
    base, chip, names, offset, texts = inp.base, inp.chip, inp.names, inp.offset, inp.texts
    dtype = chip.chip["dtype"]
    packed = None
    if tables != "plain":
        say("reading the chip's token tables")
        from backends.merge.tables import EMBED, HEAD, structure
        packed = structure(chip.files, chip.chip)
        if isinstance(packed, str):
            if tables == "structured":
                raise MergeError(f"chip {chip_dir}: its token tables cannot be stored "
                                 f"structured: {packed}; merge with --tables plain")
            packed = None
        elif tables == "auto" and packed.nbytes >= packed.plain_nbytes:
            packed = None
    skip = {EMBED, HEAD} if packed is not None else set()
    layers = None
    if tables != "plain":
        say("reading the chip's layer weights")
        from backends.merge.sparse import sparse_layers
        layers = sparse_layers(chip.files, skip)
        skip |= layers.names

    # the shards: the base's as they are, then one per chip weight file
    chip_shards: list[list[OutTensor]] = []
    for h in chip.files:
        chip_shards.append([OutTensor(_chip_name(t.name), t.dtype, t.shape, t.nbytes, h.path,
                                      t.begin) for t in sorted(h.tensors.values(),
                                                               key=lambda t: t.begin)
                            if t.name not in skip])
    chip_shards = [s for s in chip_shards if s] or [[]]
    nv, dk, dv = chip.rom_shape
    chip_shards[-1] += [OutTensor(f"chip.rom_state_{layer}", "I32", (nv, dk, dv), len(b),
                                  data=b) for layer, b in chip.rom_states.items()]
    for k, (_, states) in enumerate(chip.programs, 1):      # the other programs' states
        chip_shards[-1] += [OutTensor(f"chip.rom_state_{layer}_p{k}", "I32", (nv, dk, dv),
                                      len(b), data=b) for layer, b in states.items()]
    if packed is not None:
        chip_shards[-1] += packed.tensors
    if layers is not None:
        chip_shards[-1] += layers.tensors
    bridge = make_bridge(base, chip, fws) if firmware is not None else None
    if bridge is not None and not isinstance(bridge, str):
        chip_shards[-1] += bridge.tensors
    n = len(base.files) + len(chip_shards)
    names_out = [shard_name(i, n) for i in range(n)]
    meta = {"format": "pt"}
    sizes = [h.size for h in base.files] + [file_size(s, meta) for s in chip_shards]
    check_disk(out, sum(sizes) + sum(len(b) for b in texts.values()))

    with building_dir(out, _out_error, "cannot write the merged checkpoint") as tmp:
        weight_map: dict[str, str] = {}
        for i, h in enumerate(base.files):
            say(f"copying base shard {i + 1} of {len(base.files)}")
            copy_file(h.path, tmp / names_out[i], h.size)
            weight_map.update(dict.fromkeys(h.tensors, names_out[i]))
        for j, tensors in enumerate(chip_shards):
            say(f"writing chip shard {j + 1} of {len(chip_shards)}")
            name = names_out[len(base.files) + j]
            write_file(tmp / name, tensors, meta)
            weight_map.update(dict.fromkeys((t.name for t in tensors), name))
        index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
        (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        cfg = _config(base, chip, offset, len(names), dtype)
        if packed is not None:
            cfg["chip_tables"], cfg["chip_tables_shape"] = "structured", packed.shape
        if layers is not None and layers.config:
            cfg["chip_sparse"] = layers.config
        if bridge is not None and not isinstance(bridge, str):
            cfg["chip_bridge"] = bridge.config
        if len(fws) > 1:
            cfg["chip_programs"] = len(fws)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        shutil.copyfile(Path(__file__).with_name("shipped") / MODELING, tmp / MODELING)
        for fname, data in texts.items():
            (tmp / fname).write_bytes(data)
        roms = write_chip_files(tmp, chip)
        manifest = merge_manifest(base, chip, offset, names, dtype, roms)
        manifest["chip"]["tables"] = _tables_entry(chip, packed)
        if layers is not None and layers.config:
            manifest["chip"]["sparse_layers"] = {
                "weights": len(layers.config), "bytes": layers.nbytes,
                "dense_bytes": layers.dense_nbytes}
        if firmware is not None:
            program_files(tmp, chip, fws, manifest)
            manifest["bridge"] = ({"tool_calls": False, "why": bridge}
                                  if isinstance(bridge, str) else {"tool_calls": True})
        from backends.chipdir.merged import file_record
        manifest["files"] = file_record(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return MergeReport(out, base.nbytes, sum(sizes) + sum(len(b) for b in texts.values()),
                       sum(sizes[len(base.files):]), time.perf_counter() - t0, names_out,
                       len(names), offset)


@dataclass
class Inputs:
    """What both layouts start from: the base and the chip read and checked, OUT_DIR safe to
    build, the chip's token names from ``offset`` on, and the tokenizer and generation files
    of the output (:func:`_text_files`)."""
    base: Base
    chip: MergeChip
    names: list[str]
    offset: int
    texts: dict[str, bytes]


def read_inputs(base_dir: Path, out: Path, chip_dir: Path, dtype: str | None,
                firmware: Firmware | list[Firmware] | None, say: Callable[[str], None],
                fits: Callable[[Base, MergeChip], None] | None = None,
                digests: bool = True) -> Inputs:
    """Check OUT_DIR's name, read the base and the chip (the firmware's memory images in
    it; ``digests``: see :func:`_read_chip`), check that the chip ``fits`` the base (a
    layout's own test), then OUT_DIR (:func:`prepare_merge_output`)."""
    check_out_name(out)
    say("reading the base")
    base = read_base(base_dir)
    say("reading the chip")
    fws = programs_of(firmware)
    chip = _read_chip(chip_dir, dtype, fws[0].images if fws else None, digests,
                      [fw.images for fw in fws[1:]])
    if fits is not None:
        fits(base, chip)
    prepare_merge_output(out, base_dir, chip_dir)
    names = chip_token_names(chip.chip)
    return Inputs(base, chip, names, base.vocab_size, _text_files(base, names, base.vocab_size))


def check_disk(out: Path, need: int) -> None:
    """MergeError unless OUT_DIR's parent has ``need`` bytes (and the margin) free."""
    short = disk_shortfall(out, need)
    if short is not None:
        raise MergeError(f"OUT_DIR {out}: {short} (nothing was written)")


def write_chip_files(tmp: Path, chip: MergeChip) -> dict[str, str]:
    """``deltachip/chip.json`` (the chip's, byte for byte) and ``deltachip/roms/NAME.hex``
    (the memory images merged) under ``tmp``; memory name -> its file."""
    (tmp / "deltachip" / "roms").mkdir(parents=True)
    (tmp / "deltachip" / "chip.json").write_bytes(chip.chip_json)
    roms = {}
    for mem, words in sorted(chip.roms.items()):
        if mem not in chip.chip["memories"]:   # a table rom: its words are in the embedding
            continue
        roms[mem] = f"deltachip/roms/{mem}.hex"
        (tmp / roms[mem]).write_text(_rom_hex(words, chip.chip["memories"][mem]["width"]))
    return roms


def make_bridge(base: Base, chip: MergeChip, fws: list[Firmware] | None = None) -> Any:
    """The tool-call bridge (:mod:`backends.merge.bridge`) of a merge with the core, or why
    there is none; its ``tools``: the tool each program answers (``fws``), in order."""
    from backends.merge.bridge import build, tool_turn
    p = base.extra.get("tokenizer.json")
    if p is None:
        return "the base has no tokenizer.json"
    tok = read_json(p, "a tokenizer.json")
    bridge = build(tok, base.vocab_size, chip.chip, tool_turn(base.path)) \
        if isinstance(tok, dict) else "the base's tokenizer.json is not a JSON object"
    if fws and not isinstance(bridge, str):
        bridge.config["tools"] = [fw.tool_name for fw in fws]
    return bridge


def programs_of(firmware: Firmware | list[Firmware] | None) -> list[Firmware]:
    """``firmware`` as a list (one program, several, or none)."""
    if firmware is None:
        return []
    return list(firmware) if isinstance(firmware, (list, tuple)) else [firmware]


def program_files(tmp: Path, chip: MergeChip, fws: list[Firmware],
                  manifest: dict[str, Any]) -> None:
    """The manifest's ``firmware`` (the first program, whose images are the chip's:
    ``deltachip/roms``) and, with several programs, ``programs``: each further one's entry
    and memory images (``deltachip/roms/pK/NAME.hex``, K from 1, in the order given; its
    initial GDN states are ``chip.rom_state_L_pK`` in a routed merge)."""
    manifest["firmware"] = fws[0].manifest()
    if len(fws) < 2:
        return
    progs = []
    for k, (fw, (roms, _)) in enumerate(zip(fws[1:], chip.programs), 1):
        files = {}
        (tmp / "deltachip" / "roms" / f"p{k}").mkdir(parents=True, exist_ok=True)
        for mem, words in sorted(roms.items()):
            if mem not in chip.chip["memories"]:
                continue
            files[mem] = f"deltachip/roms/p{k}/{mem}.hex"
            (tmp / files[mem]).write_text(_rom_hex(words, chip.chip["memories"][mem]["width"]))
        progs.append({**fw.manifest(), "roms": files})
    manifest["programs"] = progs


def _tables_entry(chip: MergeChip, packed: Any) -> dict[str, Any]:
    """The manifest's account of how the chip's token tables are stored."""
    plain = sum(t.nbytes for h in chip.files for n, t in h.tensors.items()
                if n in PLAIN_TABLES)
    if packed is None:
        return {"form": "plain", "bytes": plain}
    return {"form": "structured", "bytes": packed.nbytes, "plain_bytes": plain,
            **packed.shape}


def _text_files(base: Base, names: list[str], offset: int) -> dict[str, bytes]:
    """The tokenizer and generation files of the output, by name (patched or copied)."""
    out: dict[str, bytes] = {}
    for fname, p in base.extra.items():
        if fname == "tokenizer.json":
            tok = read_json(p, "a tokenizer.json")
            if not isinstance(tok, dict):
                raise MergeError(f"{p}: not a JSON object")
            out[fname] = json.dumps(_patch_tokenizer(tok, names, offset, p),
                                    ensure_ascii=False).encode()
        else:
            out[fname] = read_text_file(p)
    if "tokenizer_config.json" in out and "tokenizer.json" not in out:
        raise MergeError(f"base {base.path}: has a tokenizer without tokenizer.json; merge adds "
                         "the chip's tokens to a fast tokenizer's tokenizer.json")
    return out


def _config(base: Base, chip: MergeChip, offset: int, count: int, dtype: str) -> dict[str, Any]:
    cfg = {
        "model_type": MODEL_TYPE,
        "architectures": ["DeltachipRoutedForCausalLM"],
        "auto_map": AUTO_MAP,
        "hidden_act": STOCK_GUARD,
        "base_config": base.config,
        "chip_config": chip.config,
        "chip_token_offset": offset,
        "chip_vocab_size": count,
        "vocab_size": offset + count,
        "chip_rom_layers": sorted(chip.rom_states),
        "tie_word_embeddings": False,
        "dtype": DTYPE_NAMES[dtype],
    }
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in base.config:
            cfg[key] = base.config[key]
    return cfg


def _version() -> str:
    """The installed deltachip's version (``unknown`` when it is run from a bare tree)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("deltachip")
    except PackageNotFoundError:
        return "unknown"


def merge_manifest(base: Base, chip: MergeChip, offset: int, names: list[str], dtype: str,
              roms: dict[str, str]) -> dict[str, Any]:
    c = chip.chip
    circuit = json.dumps(c["circuit"], sort_keys=True, separators=(",", ":")).encode()
    __version__ = _version()
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "layout": "routed",
        "deltachip_version": __version__, "dtype": dtype,
        "chip": {"name": c["circuit"]["name"], "sources": c["circuit"]["files"],
                 "circuit_sha256": _sha256(circuit),
                 "chip_json_sha256": _sha256(chip.chip_json),
                 "from": str(chip.path.resolve()), "target": c["target"]["name"],
                 "layers": c["shapes"]["layers"], "hidden": c["shapes"]["hidden"],
                 "chip_json": "deltachip/chip.json", "roms": roms},
        "tokens": {"offset": offset, "count": len(names), "first": names[0],
                   "last": names[-1], "names": "<|chip:KIND:PAYLOAD|>, <|chip:KIND|>"},
        "base": {"from": str(base.path.resolve()), "vocab_size": base.vocab_size,
                 "hidden_size": base.config["hidden_size"],
                 "layers": base.config["num_hidden_layers"],
                 "tie_word_embeddings": base.tied,
                 "vision_language": base.multimodal,
                 "config_sha256": _sha256(json.dumps(base.config, sort_keys=True).encode()),
                 "weight_files": [h.path.name for h in base.files]},
    }
