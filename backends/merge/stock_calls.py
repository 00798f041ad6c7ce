"""Tool calls in the stock layout: the driver around plain ``generate()``.

In the stock layout every position runs through every layer, so plain transformers cannot
keep a chip run's positions out of the base's caches; a call is therefore run apart, by this
driver, as ``deltachip chat`` does for a stock merge. Generation is the plain model's own
``generate()`` on the text, stopped where the model closes a call that is to be answered
(``</tool_call>`` outside a think block: the same :class:`ToolCalls` state as the routed
model's); the call's text (the bytes of its ids, from the bridge's tables) is the program's
UART input, run on the chip in a cache of its own (:func:`backends.merge.runners.stock_runner`:
the fast engine on the chip's tensors cut from the merged files, else plain transformers on
the widened model, a token at a time: both give the chip's exact tokens); the answer, the
tool turn as the base's chat template renders it (:func:`answer_calls`), is appended as
text ids and generation goes on from the same text cache. The program parks between calls
and the next call resumes it, as in the routed layout.

Takes: a stock merge written with ``--firmware`` (its manifest's ``bridge``: the ids and
tables of :mod:`backends.merge.bridge`) and the widened model loaded from it. Gives:
:class:`StockCalls`, whose :meth:`StockCalls.generate` is ``generate()`` with the calls
answered (batch 1), and whose ``state.log`` records every call.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from backends.chipdir.checkpoint import ChipDirError
from backends.merge.shipped.modeling_deltachip import (BridgeTables, ToolCalls, answer_calls,
                                                       bridge_config)


class _CallClosed:
    """Stops ``generate()`` right after the model closes a call to be answered: each new id
    is followed by the row's :class:`ToolCalls` state."""

    def __init__(self, cfg: dict, state: ToolCalls):
        self.cfg, self.state, self.seen = cfg, state, 0
        self.due = False

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kw: Any) -> torch.Tensor:
        row = input_ids[0].tolist()
        for i in row[self.seen:]:
            self.due = self.state.follow(self.cfg, i)
        self.seen = len(row)
        return torch.tensor([self.due], device=input_ids.device)


class StockCalls:
    """The tool-call driver of the stock merge at ``d`` (see the module docstring)."""

    def __init__(self, d: str | Path, model: Any, tokenizer: Any = None):
        from safetensors.torch import load_file
        from backends.engines.merged import read_manifest
        self.d, self.model = Path(d), model
        manifest = read_manifest(self.d, "")
        bridge = manifest.get("bridge") or {}
        if manifest["layout"] != "stock" or not bridge.get("tool_calls"):
            why = bridge.get("why", "it was merged without --firmware")
            raise ChipDirError(f"{self.d}: this merged model answers no tool calls ({why})")
        try:
            self.cfg = bridge_config(bridge["config"])
            t = load_file(str(self.d / bridge["tables"]))
            offsets, data = t["chip.bridge.text_offsets"], t["chip.bridge.text_data"]
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise ChipDirError(f"{self.d}: the tool-call bridge is unreadable ({e}): merge it "
                               "again") from None
        if offsets.dtype != torch.int64 or data.dtype != torch.uint8 or len(offsets) < 2 or \
                bool((offsets.diff() < 0).any()) or offsets[0] != 0 or \
                offsets[-1] != len(data):
            raise ChipDirError(f"{self.d}: the tool-call bridge's byte tables are corrupt: "
                               "merge it again")
        self.tables = BridgeTables(len(offsets) - 1, len(data))
        self.tables.load_state_dict({"text_offsets": offsets, "text_data": data})
        #: the bytes of text ids (ids outside the base's vocabulary have none)
        self.text = self.tables.text
        self.state = ToolCalls()
        self._runner: Any = None
        self._tok = tokenizer

    def runner(self) -> Any:
        """:func:`backends.merge.runners.stock_runner`, made once."""
        if self._runner is None:
            from backends.merge.runners import stock_runner
            self._runner = stock_runner(self.d, self.model)
        return self._runner

    def tokenize(self, text: str) -> list[int]:
        if self._tok is None:
            from transformers import AutoTokenizer
            self._tok = AutoTokenizer.from_pretrained(str(self.d), config=self.model.config)
        return self._tok(text, add_special_tokens=False).input_ids

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int = 512, streamer: Any = None,
                 **generate: Any) -> torch.Tensor:
        """``model.generate(ids, ...)`` (batch 1) in which every call the model closes is
        answered: the ids, prompt and all, with the tool turns in the text. The answers
        count toward ``max_new_tokens``; so does everything generated."""
        from transformers import DynamicCache, StoppingCriteriaList
        if ids.shape[0] != 1:
            raise ValueError("the stock layout's driver generates one sequence at a time")
        cache = DynamicCache(config=self.model.config)
        stop = _CallClosed(self.cfg, self.state)
        seq, left = ids, max_new_tokens
        while left > 0:
            stop(seq, None)                 # the ids not yet followed (the prompt, answers)
            if stop.due:                    # a call closed at the last id: answer the turn
                stop.due = False
                calls, self.state.calls = self.state.calls, []
                answer = answer_calls(self.runner, self.cfg,
                                      [(lambda c=c: self.text(c)) for c in calls],
                                      [len(c) for c in calls], self.state,
                                      self.tokenize)[:left]
                left -= len(answer)
                seq = torch.cat([seq, torch.tensor([answer], dtype=seq.dtype)], dim=1)
                if streamer is not None:
                    streamer.next_tokens_are_prompt = False
                    streamer.put(torch.tensor(answer))
                    streamer.end()
                continue
            out = self.model.generate(seq, cache=cache, max_new_tokens=left,
                                      stopping_criteria=StoppingCriteriaList([stop]),
                                      streamer=streamer, **generate)
            new = out[0, seq.shape[1]:].tolist()
            left -= len(new)
            seq = out
            if not new or not stop.due:
                break
        return seq
