"""Chatting with a merged model that answers its own tool calls (the Python API behind
``deltachip chat``).

Takes: a merged checkpoint written by ``deltachip merge --firmware calc`` (its bridge:
backends/merge/bridge.py). Gives: :class:`Chat`, whose :meth:`Chat.reply` streams the
model's reply to a prompt through plain ``generate()`` (a ``TextStreamer``). The prompt is
a user turn rendered by the base's own chat template with the calc tool offered as that
template expects (Qwen3.5's: the tools block in the system turn), in non-thinking mode
unless ``thinking``. When the model closes a ``<tool_call>`` (outside a think block), the
program in its chip runs on the call's text (XML or JSON form) and the answer comes back
as the tool turn the template renders (a user turn of ``<tool_response>`` blocks, then a
new assistant turn), and generation goes on; the streamer shows it as that text. Routed layout: the
merged model itself does it inside ``generate()``; stock layout: plain transformers, the
call run apart by :class:`backends.merge.stock_calls.StockCalls` (plain modules cannot keep
a chip run out of the base's caches). :attr:`Chat.calls` records every call: the call's tokens, the chip's
tokens and instructions, its time and engine, and what the program printed.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

from backends.chipdir.checkpoint import ChipDirError

#: the tool the chat template is told about for a merge whose manifest declares none (calc's
#: declaration: firmware/calc/__init__.py)
from firmware.calc import TOOL as CALC_TOOL  # noqa: E402


def manifest_tools(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools a merged model answers, as its manifest declares them (``firmware.tool``,
    then each of ``programs``' ``tool``; cpu/rv32/merged.py): calc's where a merge made
    before tools were declared names none."""
    progs = [manifest.get("firmware")] + list(manifest.get("programs") or [])
    tools = [p["tool"] for p in progs if isinstance(p, dict) and isinstance(p.get("tool"), dict)
             and isinstance(p["tool"].get("function"), dict)]
    return tools or [CALC_TOOL]


def _check_generation_config(d: Path, model: Any, budget: bool) -> None:
    """ChipDirError naming ``d``/generation_config.json when a field generate() or the
    bridge reads is of the wrong kind (transformers takes it as it is and fails inside
    generation): the token ids, and (``budget``: no --call-budget given) chip_call_budget."""
    import json
    gc, vocab = model.generation_config, int(model.config.vocab_size)
    f = d / "generation_config.json"
    for key in ("eos_token_id", "pad_token_id", "bos_token_id", "decoder_start_token_id"):
        v = getattr(gc, key, None)
        ids = v if isinstance(v, list) else [v]
        if v is not None and not (ids and all(type(i) is int and 0 <= i < vocab for i in ids)):
            raise ChipDirError(f"{f}: {key} must be a token id (an integer below {vocab:,}) or "
                               f"a list of them, got {json.dumps(v)[:40]}: merge it again")
    n = getattr(gc, "chip_call_budget", None)
    if budget and n is not None and not (type(n) is int and n > 0):
        raise ChipDirError(f"{f}: chip_call_budget must be a positive integer (the most chip "
                           f"tokens a tool call runs), got {json.dumps(n)[:40]}: fix it, or "
                           f"give --call-budget N")


class Chat:
    """A merged checkpoint loaded for chatting (see the module docstring)."""

    def __init__(self, path: str | Path, dtype: str = "bf16", thinking: bool = False,
                 call_budget: int | None = None):
        from transformers.utils import logging as hf_logging
        from backends.chipdir.checkpoint import load_chip_json
        from backends.engines.merged import check_chip_config, check_files, read_manifest
        d = Path(path)
        manifest = read_manifest(d, "")
        check_files(d, manifest)        # every file as the merge wrote it, before loading
        if manifest["layout"] == "routed":  # and what the modeling file reads first
            check_chip_config(d, load_chip_json(d / "deltachip"), manifest)
        bridge = manifest.get("bridge") if isinstance(manifest.get("bridge"), dict) else {}
        if not bridge.get("tool_calls"):
            why = bridge.get("why", "it was merged without --firmware")
            raise ChipDirError(f"{d}: this merged model answers no tool calls ({why}); merge "
                               f"with `deltachip merge BASE_DIR OUT_DIR --firmware calc`")
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        #: the stock layout's driver (None: the routed model answers inside generate())
        self.driver: Any = None
        try:
            self._load(d, manifest, dtype)
        except ChipDirError:
            raise
        except (Exception, SystemExit) as e:    # the model's own code, run from its folder:
            #                                     any error, even an exit
            from backends.engines.merged import load_error
            raise load_error(d, e) from None
        _check_generation_config(d, self.model, call_budget is None)
        if call_budget is not None:         # the most chip tokens a call runs
            self.model.generation_config.chip_call_budget = call_budget
            if self.driver is not None:
                self.driver.cfg["max_tokens"] = call_budget
        self.thinking = thinking
        self.calls: list[dict[str, Any]] = []
        #: the tools offered to the chat template: the merged programs' (manifest)
        self.tools = manifest_tools(manifest)

    def _load(self, d: Path, manifest: dict[str, Any], dtype: str) -> None:
        """The model, its tokenizer and (stock layout) the call driver, loaded from ``d``."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if manifest["layout"] == "stock":   # plain transformers, calls run by the driver
                from backends.engines.hf import load_checked
                from backends.merge.stock_calls import StockCalls
                from backends.chipdir.numbers import DTYPES
                self.model = load_checked(d, DTYPES[manifest["dtype"]], "merge it again")
                self.driver = None
            else:
                self.model = AutoModelForCausalLM.from_pretrained(
                    str(d), trust_remote_code=True,
                    dtype=torch.bfloat16 if dtype == "bf16" else torch.float32).eval()
            # the loaded model's config: AutoTokenizer does not read config.json (a routed
            # merge's names remote code, which would ask to run it)
            self.tok = AutoTokenizer.from_pretrained(str(d), config=self.model.config)
            if manifest["layout"] == "stock":
                self.driver = StockCalls(d, self.model, self.tok)

    def prompt_text(self, prompt: str) -> str:
        """The prompt as a user turn of the base's chat template, the merged programs' tools
        offered (:func:`manifest_tools`), the
        generation prompt in thinking or non-thinking mode; Qwen's form where the base has
        no template."""
        msgs = [{"role": "user", "content": prompt}]
        if self.tok.chat_template is None:
            return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
        return self.tok.apply_chat_template(msgs, tools=self.tools, tokenize=False,
                                            add_generation_prompt=True,
                                            enable_thinking=self.thinking)

    def prompt_ids(self, prompt: str) -> Any:
        """:meth:`prompt_text`'s ids."""
        return self.tok(self.prompt_text(prompt), return_tensors="pt",
                        add_special_tokens=False).input_ids

    def reply(self, prompt: str, max_new_tokens: int = 512, out: TextIO | None = None,
              do_sample: bool = False, start: str = "", **generate: Any) -> str:
        """Stream the reply to ``prompt`` on ``out`` (the reply begins with ``start``: the
        model's turn is prefilled with it, e.g. a tool call); returns it whole. ``out``:
        where to stream (default: standard output, as it is at the call)."""
        out = out if out is not None else sys.stdout
        from transformers import TextStreamer

        class _Out(TextStreamer):
            def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
                out.write(text)
                out.flush()
        ids = self.prompt_ids(prompt)
        if start:
            import torch
            out.write(start)
            ids = torch.cat([ids, self.tok(start, return_tensors="pt",
                                           add_special_tokens=False).input_ids], dim=1)
        streamer = _Out(self.tok, skip_prompt=True)
        options = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, streamer=streamer,
                       pad_token_id=self.tok.pad_token_id or 0, **generate)
        if self.driver is not None:
            n0 = len(self.driver.state.log)
            gen = self.driver.generate(ids, **options)
            self.calls += self.driver.state.log[n0:]
        else:
            cache = self.model.new_cache()
            gen = self.model.generate(ids, cache=cache, **options)
            for st in cache.calls or []:
                self.calls += st.log
        out.write("\n")
        out.flush()
        return self.tok.decode(gen[0, ids.shape[1]:])
