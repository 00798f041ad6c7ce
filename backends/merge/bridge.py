"""The tool-call bridge of a merge with the RISC-V core (``--firmware``).

What the shipped modeling file (routed) or the driver (stock) needs to answer a tool call
from the chip (its ``chip_bridge`` config entry), built at merge time from the base's
tokenizer and the chip's token kinds:

- how the core reads a call. A core compiled for the base's vocabulary (a routed merge:
  :func:`text_vocabulary` gives every text id's bytes, which ``deltachip merge`` bakes into
  the core's table ROMs) reads the call's text ids themselves as ``Text`` tokens
  (``chip_bridge.text``: the kind's first chip id; docs/cpu.md, "Text input"): no table
  here. A core without one (the stock layout's) reads bytes on ``UART_RX``: then the bytes
  of every base text id go with the bridge (``chip.bridge.text_offsets`` I64 [vocab + 1]
  and ``chip.bridge.text_data`` U8), and a call's text is the concatenation of its ids'
  bytes, answered byte by byte with In(byte);
- the ids the call is recognised by (``<tool_call>``, ``</tool_call>``), the text id of each
  single byte (what a byte the firmware prints comes back as), and the ids of the text
  around the answer (``\\n<tool_response>\\n`` … ``\\n</tool_response>\\n``, in the
  assistant's turn, which the model then goes on writing);
- the chip ids of the core's Want, In(0), Out (and where its byte field sits), End and
  Fault, and its start token.

Takes: the base's tokenizer.json (parsed), its vocab_size, the chip's chip.json. Gives:
:class:`Bridge`, or the reason there is none (a tokenizer that is not byte-level, one
without Qwen's tool-call tokens, a chip that is not the core).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.merge.stfile import OutTensor

#: the text around a tool's answer: inside the assistant's turn, right after the call (a
#: new turn would start with <|im_end|>, which ends generate())
PREFIX = "\n<tool_response>\n"
SUFFIX = "\n</tool_response>\n"
OPEN, CLOSE = "<tool_call>", "</tool_call>"
#: the most chip tokens one call may take before it is answered with an error
MAX_TOKENS = 20_000_000


@dataclass
class Bridge:
    config: dict[str, Any]
    tensors: list[OutTensor]


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character that stands for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    n = 0
    out = {}
    for b in range(256):
        if b in keep:
            out[chr(b)] = b
        else:
            out[chr(256 + n)] = b
            n += 1
    return out


def _byte_level(tok: dict[str, Any]) -> bool:
    def has(node: Any) -> bool:
        if not isinstance(node, dict):
            return False
        if node.get("type") == "ByteLevel":
            return True
        return any(has(n) for n in node.get("decoders", []) or [])
    return has(tok.get("decoder"))


def _added(tok: dict[str, Any]) -> dict[str, int]:
    return {a["content"]: a["id"] for a in tok.get("added_tokens") or []
            if isinstance(a, dict) and "content" in a and "id" in a}


def vocab_bytes(tok: dict[str, Any], vocab_size: int) -> list[bytes] | str:
    """Every base text id's bytes (a byte-level BPE entry mapped back through GPT-2's
    byte-to-unicode table, an added token's content as UTF-8; b"" for an id with neither),
    or why the tokenizer cannot give them (not byte-level BPE, no tool-call tokens, no
    single-byte token for every byte)."""
    if not _byte_level(tok):
        return "the base's tokenizer is not byte-level BPE"
    model = tok.get("model") or {}
    vocab: dict[str, int] = dict(model.get("vocab") or {})
    added = _added(tok)
    if OPEN not in added or CLOSE not in added:
        return f"the base's tokenizer has no {OPEN} and {CLOSE} tokens"
    dec = byte_decoder()
    text: list[bytes] = [b""] * vocab_size
    for s, i in vocab.items():
        if 0 <= i < vocab_size and i not in added.values():
            try:
                text[i] = bytes(dec[ch] for ch in s)
            except KeyError:
                return f"the vocabulary entry {s!r} is not byte-level"
    for s, i in added.items():
        if 0 <= i < vocab_size:
            text[i] = s.encode("utf-8")
    single = {t[0] for i, t in enumerate(text) if len(t) == 1 and i not in added.values()}
    if len(single) != 256:
        return f"the tokenizer has no single-byte token for {256 - len(single)} bytes"
    return text


def text_vocabulary(base: Any) -> list[bytes] | None:
    """Every text id's bytes from a base's tokenizer (:func:`vocab_bytes`; ``base``: a
    :class:`backends.merge.base.Base`), or None where it has none to give (the bridge then
    says why): what a core compiled for the base reads its Text tokens with."""
    from backends.merge.base import read_json
    p = base.extra.get("tokenizer.json")
    tok = read_json(p, "a tokenizer.json") if p is not None else None
    text = vocab_bytes(tok, base.vocab_size) if isinstance(tok, dict) else None
    return text if isinstance(text, list) else None


def build(tok: dict[str, Any], vocab_size: int, chip: dict[str, Any]) -> Bridge | str:
    """The bridge for a base tokenizer and the core (see the module docstring), or why
    there is none."""
    from backends.chipfile import circuit_from_json
    text = vocab_bytes(tok, vocab_size)
    if isinstance(text, str):
        return text
    added = _added(tok)
    c = circuit_from_json(chip["circuit"], chip.get("roms", {}))
    kinds = {k.name: i for i, k in enumerate(c.kinds)}
    if not {"Want", "In", "Out", "End", "Fault", "Jump", "Step", "Next"} <= set(kinds):
        return "the chip is not the RISC-V core (no Want/In/Out tokens)"
    single: dict[int, int] = {}
    for i, t in enumerate(text):
        if len(t) == 1 and i not in added.values():
            single.setdefault(t[0], i)

    def ids(s: str) -> list[int]:
        # the template text: added tokens, else one id per byte (what the model reads back)
        out, i = [], 0
        while i < len(s):
            sp = next((a for a in added if s.startswith(a, i)), None)
            if sp is not None:
                out.append(added[sp])
                i += len(sp)
            else:
                out += [single[b] for b in s[i].encode("utf-8")]
                i += 1
        return out
    offs = c.kind_offsets()
    # text mode: the core reads the call's text ids as Text tokens, their bytes from its own
    # table ROMs (compiled from this tokenizer: docs/cpu.md, "Text input"); else bytes
    text_k = c.kinds[kinds["Text"]] if "Text" in kinds else None
    text_mode = text_k is not None and text_k.ids >= vocab_size and \
        c.memories["tlen"].init[:vocab_size] == tuple(min(len(t), 255) for t in text)
    out_k = c.kinds[kinds["Out"]]
    names = [f.name for f in out_k.fields]
    b_shift = sum(f.width for f in out_k.fields[:names.index("b")])
    go_bit = sum(f.width for f in out_k.fields[:names.index("go")])
    lens = np.array([len(t) for t in text], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    data = np.frombuffer(b"".join(text), dtype=np.uint8)
    config = {
        "call_open": added[OPEN], "call_close": added[CLOSE],
        "byte_ids": [single[b] for b in range(256)],
        "prefix": ids(PREFIX), "suffix": ids(SUFFIX),
        "start": c.token_id(c.start),
        "want": offs[kinds["Want"]], "in": offs[kinds["In"]],
        "out": [offs[kinds["Out"]], out_k.ids], "out_b_shift": b_shift,
        "end": [offs[kinds["End"]], c.kinds[kinds["End"]].ids],
        "fault": [offs[kinds["Fault"]], c.kinds[kinds["Fault"]].ids],
        # the tokens that execute an instruction (cpu/rv32/protocol.py: Jump, Step, Next,
        # and Out with go = 1), so a run can count the instructions it retired
        "executes": [[offs[kinds[k]], c.kinds[kinds[k]].ids]
                     for k in ("Jump", "Step", "Next")],
        "out_go_bit": go_bit,
        "max_tokens": MAX_TOKENS,
    }
    if text_mode:
        config["text"] = offs[kinds["Text"]]
        return Bridge(config, [])
    config["text_bytes"] = int(offsets[-1])
    tensors = [OutTensor("chip.bridge.text_offsets", "I64", offsets.shape, offsets.nbytes,
                         data=offsets.tobytes()),
               OutTensor("chip.bridge.text_data", "U8", data.shape, data.nbytes,
                         data=data.tobytes())]
    return Bridge(config, tensors)
