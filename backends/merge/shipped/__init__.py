"""Files a merged checkpoint ships: ``modeling_deltachip.py``, copied into every routed merge.
It imports only torch and transformers (tests/merge/test_modeling_sealed.py)."""
