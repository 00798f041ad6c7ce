"""The tool-call bridge of a merge with the RISC-V core (``--firmware``).

What the shipped modeling file (routed) or the driver (stock) needs to answer a tool call
from the chip (its ``chip_bridge`` config entry), built at merge time from the base's
tokenizer, its chat template and the chip's token kinds:

- how the core reads a call. A core compiled for the base's vocabulary (a routed merge:
  :func:`text_vocabulary` gives every text id's bytes, which ``deltachip merge`` bakes into
  the core's table ROMs) reads the call's text ids themselves as ``Text`` tokens
  (``chip_bridge.text``: the kind's first chip id; docs/cpu.md, "Text input"): no table
  here. The core reads at most 32 bytes of a token (Qwen3.5's vocabulary has 360 longer
  ids, up to 128 bytes): a longer id's table entry holds its first 32 bytes, and the rest go
  in 32-byte pieces at ids past the vocabulary, which the bridge feeds after it
  (``chip_bridge.long``: ``[id, first piece, pieces]``), so the program reads the whole
  text through the weights. A core without one (the stock layout's) reads bytes on
  ``UART_RX``: then the bytes of every base text id go with the bridge
  (``chip.bridge.text_offsets`` I64 [vocab + 1] and ``chip.bridge.text_data`` U8), and a
  call's text is the concatenation of its ids' bytes, answered byte by byte with In(byte);
- the ids the conversation is followed by: ``<tool_call>``/``</tool_call>``,
  ``<|im_start|>`` (a new turn) and ``<think>``/``</think>`` (a call inside a think block is
  reasoning, not run), and the ids of blank text (a think block of those alone is empty:
  the turn is in non-thinking mode);
- the tool turn that answers the calls of an assistant turn, as the base's own chat template
  renders it (:func:`tool_turn`: the text after the last ``</tool_call>`` of the rendered
  conversation with the tool messages and the generation prompt, cut at each result:
  ``before``, ``between`` results, ``after``), in the non-thinking (``plain``) and thinking
  form; Qwen's documented form where the template renders none;
- the chip ids of the core's Want, In(0), Out (and where its byte field sits), End and
  Fault, and its start token.

Takes: the base's tokenizer.json (parsed), its vocab_size, the chip's chip.json, and the
tool turn's text. Gives: :class:`Bridge`, or the reason there is none (a tokenizer that is
not byte-level, one without Qwen's tool-call tokens, a chip that is not the core).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.chipdir.stfile import OutTensor

OPEN, CLOSE = "<tool_call>", "</tool_call>"
TURN, THINK, UNTHINK = "<|im_start|>", "<think>", "</think>"
#: the tool turn in Qwen's documented form (its templates: the results as one user turn of
#: <tool_response> blocks, then the generation prompt), for a base whose template renders
#: none: (before, between, after) the results
QWEN_TURN = ("<|im_end|>\n<|im_start|>user\n<tool_response>\n",
             "\n</tool_response>\n<tool_response>\n",
             "\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
#: the most bytes of a text token the core reads (cpu/memmap.py TEXT_BYTES)
PIECE = 32
#: the most chip tokens one call may take before it is answered with an error: about a
#: minute on the fast engine (4,000-5,600 chip tokens a second at qwen3.5-4b shapes), so a
#: program that never ends is answered; a call may need more (calc's largest result,
#: 2**3401, takes 582,408): ``generation_config.chip_call_budget`` or ``deltachip chat
#: --call-budget N`` raises it
MAX_TOKENS = 250_000


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


def text_pieces(text: list[bytes]) -> tuple[list[bytes], list[list[int]]]:
    """The core's text table entries for a vocabulary (``text[i]``: id i's bytes): each id's
    first :data:`PIECE` bytes at its own id, and the rest of every longer id in pieces of
    :data:`PIECE` bytes at ids from ``len(text)`` on; and ``[id, first piece, pieces]`` for
    each longer id (what the bridge feeds after it)."""
    table = [t[:PIECE] for t in text]
    long = []
    for i, t in enumerate(text):
        if len(t) > PIECE:
            rest = [t[k:k + PIECE] for k in range(PIECE, len(t), PIECE)]
            long.append([i, len(table), len(rest)])
            table += rest
    return table, long


def text_vocabulary(base: Any) -> list[bytes] | None:
    """The core's text table entries for a base's tokenizer (:func:`vocab_bytes`, split by
    :func:`text_pieces`; ``base``: a :class:`backends.merge.base.Base`), or None where it has
    none to give (the bridge then says why): what a core compiled for the base reads its
    Text tokens with."""
    from backends.merge.base import read_json
    p = base.extra.get("tokenizer.json")
    tok = read_json(p, "a tokenizer.json") if p is not None else None
    text = vocab_bytes(tok, base.vocab_size) if isinstance(tok, dict) else None
    return text_pieces(text)[0] if isinstance(text, list) else None


def tool_turn(base_path: Any) -> dict[str, Any]:
    """The tool turn as the base's chat template renders it (see the module docstring):
    ``{"plain": [before, between, after], "thinking": [...], "template": "base"}``, or
    Qwen's documented form (``"template": "qwen"``) where the base has no template, it
    fails, or it renders no ``</tool_call>`` before the results."""
    marks = ("\x00deltachip-result-0\x00", "\x00deltachip-result-1\x00")
    out: dict[str, Any] = {}
    try:
        import warnings
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = AutoTokenizer.from_pretrained(str(base_path))
        call = {"type": "function", "function": {"name": "calc",
                                                 "arguments": {"expression": "1"}}}
        for mode, thinking in (("plain", False), ("thinking", True)):
            msgs = [{"role": "user", "content": "?"},
                    {"role": "assistant", "content": "", "tool_calls": [call, call]},
                    {"role": "tool", "content": marks[0]},
                    {"role": "tool", "content": marks[1]}]
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                           enable_thinking=thinking)
            if not isinstance(text, str) or CLOSE not in text:
                raise ValueError("no call rendered")
            tail = text[text.rindex(CLOSE) + len(CLOSE):]
            a, rest = tail.split(marks[0])
            b, c = rest.split(marks[1])
            if not a or marks[0] in c:
                raise ValueError("results out of place")
            out[mode] = [a, b, c]
        out["template"] = "base"
        return out
    except Exception:                       # no template, or one that renders no calls
        pass
    return {"plain": list(QWEN_TURN), "thinking": list(QWEN_TURN), "template": "qwen"}


def build(tok: dict[str, Any], vocab_size: int, chip: dict[str, Any],
          turn: dict[str, Any] | None = None) -> Bridge | str:
    """The bridge for a base tokenizer and the core (see the module docstring), or why
    there is none; ``turn``: :func:`tool_turn` (default: Qwen's documented form)."""
    from backends.chipdir.chipfile import circuit_from_json
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
    table, long = text_pieces(text)
    text_mode = text_k is not None and text_k.ids >= len(table) and \
        c.memories["tlen"].init[:len(table)] == tuple(len(t) for t in table)
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
        "turn_start": added.get(TURN), "think": [added[THINK], added[UNTHINK]]
        if THINK in added and UNTHINK in added else None,
        # the ids of blank text: a think block of these only is empty (non-thinking mode)
        "blank": [i for i, t in enumerate(text)
                  if t and not t.strip(b" \t\r\n") and i not in added.values()],
        "turn": turn or {"plain": list(QWEN_TURN), "thinking": list(QWEN_TURN),
                         "template": "qwen"},
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
        config["long"] = long
        return Bridge(config, [])
    config["text_bytes"] = int(offsets[-1])
    tensors = [OutTensor("chip.bridge.text_offsets", "I64", offsets.shape, offsets.nbytes,
                         data=offsets.tobytes()),
               OutTensor("chip.bridge.text_data", "U8", data.shape, data.nbytes,
                         data=data.tobytes())]
    return Bridge(config, tensors)
