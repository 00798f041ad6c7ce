"""Merging a compiled chip into a stock Qwen3.5 text checkpoint (``deltachip merge``).

- :mod:`backends.merge.base`: the base checkpoint read and checked (nothing loaded);
- :mod:`backends.merge.stfile`: safetensors files read and written as bytes, streamed;
- :mod:`backends.merge.routed`: the routed layout's writer (:func:`merge_routed`);
- :mod:`backends.merge.stock`: the stock layout's writer (:func:`merge_stock`): one widened
  ``Qwen3_5ForCausalLM``, no remote code;
- ``modeling_deltachip.py``: the model the routed checkpoint ships (``trust_remote_code``).

docs/merge.md describes the layout and what it promises.
"""
