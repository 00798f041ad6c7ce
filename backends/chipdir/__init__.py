"""Chip directories on disk: the one reader and writer of what the compiler writes and what
the engines and the merge read.

- :mod:`checkpoint`: a compiled chip directory (config, chip.json, shards), written safely
  and read back with clear errors; :mod:`manifest` the digests of its files;
  :mod:`chipfile` and :mod:`chipschema` the circuit as JSON and chip.json's schema.
- :mod:`stfile` and :mod:`weights`: safetensors files, byte for byte and as tensors.
- :mod:`merged`: the names and small JSON files of a merged checkpoint; :mod:`stock`: where
  the chip sits in a stock merged checkpoint.
- :mod:`memory`: where a memory's words sit in Gated DeltaNet state: images in, words out.
- :mod:`target` and :mod:`numbers`: the Qwen3.5 shapes and the float dtypes a chip
  declares.

Nothing here imports another part of ``backends``: the compiler, the engines, the checker
and the merge all stand on it.
"""
