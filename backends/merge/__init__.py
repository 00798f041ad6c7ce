"""Merging a compiled chip into a stock Qwen3.5 text checkpoint (``deltachip merge``), and
the tool calls a merged model answers.

- :mod:`backends.merge.base`: the base checkpoint read and checked (nothing loaded);
- :mod:`backends.merge.routed`: the routed layout's writer (:func:`merge_routed`), with
  :mod:`tables` and :mod:`sparse` (the chip's tensors in structured and sparse form);
- :mod:`backends.merge.stock`: the stock layout's writer (:func:`merge_stock`): one widened
  ``Qwen3_5ForCausalLM``, no remote code;
- :mod:`backends.merge.bridge`: the tool-call bridge of a merge with the RISC-V core;
  :mod:`runners` and :mod:`stock_calls` answer calls on deltachip's engines;
- ``shipped/modeling_deltachip.py``: the model the routed checkpoint ships
  (``trust_remote_code``).

It reads and writes files through :mod:`backends.chipdir` and runs chips through
:mod:`backends.engines`. docs/merge.md describes the layout and what it promises.
"""
