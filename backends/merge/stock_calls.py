"""Tool calls in the stock layout: the driver around plain ``generate()``.

In the stock layout every position runs through every layer, so plain transformers cannot
keep a chip run's positions out of the base's caches; a call is therefore run apart, by this
driver, as ``deltachip chat`` does for a stock merge. Generation is the plain model's own
``generate()`` on the text, stopped where the model writes ``</tool_call>``; the call's text
(the bytes of its ids, from the bridge's tables) is the program's UART input, run on the
chip in a cache of its own (the fast engine on the chip's tensors cut from the merged files,
else plain transformers on the widened model, a token at a time: both give the chip's exact
tokens); the answer, ``<tool_response>`` around the bytes the program printed, is appended
as text ids and generation goes on from the same text cache. The program parks between
calls and the next call resumes it, as in the routed layout
(:func:`backends.merge.modeling_deltachip.answer_call` runs a call in both).

Takes: a stock merge written with ``--firmware`` (its manifest's ``bridge``: the ids and
tables of :mod:`backends.merge.bridge`) and the widened model loaded from it. Gives:
:class:`StockCalls`, whose :meth:`StockCalls.generate` is ``generate()`` with the calls
answered (batch 1), and whose ``state.log`` records every call.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from backends.checkpoint import ChipDirError
from backends.merge.modeling_deltachip import BridgeTables, FastChip, ToolCalls, answer_call


class EngineChip:
    """:func:`backends.merge.modeling_deltachip.run_call`'s runner on any chip engine, a
    token at a time (its ``decode_step``)."""

    def __init__(self, eng: Any, name: str = "transformers"):
        self.eng, self.name = eng, name

    def new(self) -> Any:
        return self.eng.new_cache(1)

    def advance(self, state: Any, first: int, n: int, stop: set[int]) -> list[int]:
        out, tok = [], first
        for _ in range(n):
            tok = int(self.eng.decode_step([tok], state)[0])
            out.append(tok)
            if tok in stop:
                break
        return out


class _CallClosed:
    """Stops ``generate()`` right after the model writes ``</tool_call>``."""

    def __init__(self, close: int):
        self.close = close

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kw: Any) -> torch.Tensor:
        return input_ids[:, -1] == self.close


class StockCalls:
    """The tool-call driver of the stock merge at ``d`` (see the module docstring)."""

    def __init__(self, d: str | Path, model: Any):
        from safetensors.torch import load_file
        from backends.merge.engine import read_manifest
        self.d, self.model = Path(d), model
        manifest = read_manifest(self.d)
        bridge = manifest.get("bridge") or {}
        if manifest["layout"] != "stock" or not bridge.get("tool_calls"):
            why = bridge.get("why", "it was merged without --firmware")
            raise ChipDirError(f"{self.d}: this merged model answers no tool calls ({why})")
        try:
            self.cfg = dict(bridge["config"])
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

    def runner(self) -> Any:
        """The fast engine on the merged files where it loads, else plain transformers on
        the loaded model (said once on stderr)."""
        if self._runner is None:
            try:
                self._runner = FastChip(str(self.d))
            except Exception as e:          # refused or not built: say why, once
                from backends.merge.engine import StockEngine
                print(f"deltachip: tool calls run on transformers' modules (slow): {e}",
                      file=sys.stderr)
                self._runner = EngineChip(StockEngine(self.d, model=self.model,
                                                      roms=FastChip.roms(self.d)))
        return self._runner

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int = 512, streamer: Any = None,
                 **generate: Any) -> torch.Tensor:
        """``model.generate(ids, ...)`` (batch 1) in which every ``<tool_call>`` the model
        writes is answered: the ids, prompt and all, with the answers in the text. The
        answers count toward ``max_new_tokens``; so does everything generated."""
        from transformers import DynamicCache, StoppingCriteriaList
        if ids.shape[0] != 1:
            raise ValueError("the stock layout's driver generates one sequence at a time")
        cache = DynamicCache(config=self.model.config)
        stop = StoppingCriteriaList([_CallClosed(self.cfg["call_close"])])
        seq, left = ids, max_new_tokens
        open_, close = self.cfg["call_open"], self.cfg["call_close"]
        while left > 0:
            row = seq[0].tolist()
            # the last <tool_call> or </tool_call> before the last id
            last = next((i for i in range(len(row) - 2, -1, -1) if row[i] in (open_, close)),
                        None)
            if row[-1] == close and last is not None and row[last] == open_:  # a call closed
                call = row[last + 1:-1]
                answer = answer_call(self.runner, self.cfg, lambda: self.text(call),
                                     len(call), self.state)[:left]
                left -= len(answer)
                seq = torch.cat([seq, torch.tensor([answer], dtype=seq.dtype)], dim=1)
                if streamer is not None:
                    streamer.next_tokens_are_prompt = False
                    streamer.put(torch.tensor(answer))
                    streamer.end()
                continue
            out = self.model.generate(seq, cache=cache, max_new_tokens=left,
                                      stopping_criteria=stop, streamer=streamer, **generate)
            new = out[0, seq.shape[1]:].tolist()
            left -= len(new)
            seq = out
            if not new or new[-1] != close:
                break
        return seq
