"""deltachip firmware: isa_tests (data files; see docs/firmware.md)."""
